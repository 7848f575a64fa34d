// Pure helpers of the web client: no DOM, no audio, so Node's test runner can import them.
// The msgpack decoder comes from vendor/msgpack.min.js (@msgpack/msgpack, UMD build), which
// the page loads as a classic script before this module and which defines globalThis.MessagePack.

export const REALTIME_PATH = "/v1/realtime";

/**
 * The realtime endpoint on the page's own host, with the page's `?token=` passed on and, if
 * given, the output `sampleRate` asked for (the voice's own rate otherwise). The page always
 * takes the default encoding, pcm_s16le.
 */
export function realtimeUrl(loc, sampleRate = null) {
  const scheme = loc.protocol === "https:" ? "wss:" : "ws:";
  const token = new URLSearchParams(loc.search).get("token");
  const params = [];
  if (token) params.push(`token=${encodeURIComponent(token)}`);
  if (sampleRate) params.push(`sample_rate=${sampleRate}`);
  const query = params.length ? `?${params.join("&")}` : "";
  return `${scheme}//${loc.host}${REALTIME_PATH}${query}`;
}

let decoder = null;

/** One binary audio frame: {turnId, seq, startSample, samples: Float32Array in [-1, 1)}. */
export function decodeFrame(data) {
  if (decoder === null) {
    const msgpack = globalThis.MessagePack;
    if (!msgpack) throw new Error("vendor/msgpack.min.js is not loaded");
    decoder = new msgpack.Decoder();
  }
  const bytes = data instanceof Uint8Array ? data : new Uint8Array(data);
  const map = decoder.decode(bytes);
  const pcm = map.pcm;
  if (!(pcm instanceof Uint8Array) || typeof map.turn_id !== "string") {
    throw new Error("not an audio frame");
  }
  return {
    turnId: map.turn_id,
    seq: map.seq,
    startSample: map.start_sample,
    samples: pcm16ToFloat32(pcm),
  };
}

/** Signed 16-bit little-endian PCM to floats, whatever the platform's byte order. */
export function pcm16ToFloat32(bytes) {
  const n = bytes.byteLength >> 1;
  const view = new DataView(bytes.buffer, bytes.byteOffset, n * 2);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = view.getInt16(2 * i, true) / 32768;
  return out;
}

/**
 * Cut text the way an LLM streams it: word pieces of at most `piece` characters, each word's
 * leading whitespace kept on its first piece and punctuation as its own token. Joining the
 * tokens gives the text back exactly.
 */
export function tokenize(text, piece = 4) {
  const tokens = [];
  for (const [, space, word] of text.matchAll(/(\s*)(\S+|$)/gu)) {
    if (!word) {
      if (space) tokens.push(space);
      continue;
    }
    const parts = word.match(/[\p{L}\p{N}'’]+|[^\p{L}\p{N}'’]/gu) ?? [word];
    let first = true;
    for (const part of parts) {
      const chars = Array.from(part); // code points, so no surrogate pair is split
      for (let i = 0; i < chars.length; i += piece) {
        tokens.push((first ? space : "") + chars.slice(i, i + piece).join(""));
        first = false;
      }
    }
  }
  return tokens;
}

/**
 * Which of a turn's text has been played. `segments` are the turn's `segment` events
 * ({text, start_sample}, with `words` from its `words` event where the server sent one) in
 * order, `played` the samples the player has output, `total` the turn's samples so far
 * (received, or turn_done's count). Each segment is marked "heard", "partial" or "unheard";
 * for a partial one, `heardChars` is how far into it the listener got: to the end of the last
 * word that started playing where the words are placed, else estimated by time and snapped
 * back to a word end. `heardText` is everything heard, and
 * `heardEnd` its end as an index into `text`, the turn's whole text (-1 if not found there).
 */
export function heardSummary(text, segments, played, total) {
  const out = [];
  let cursor = 0;
  let heardEnd = 0;
  let found = true;
  const heard = [];
  segments.forEach((seg, i) => {
    const end = i + 1 < segments.length ? segments[i + 1].start_sample : Math.max(total, played);
    const at = found ? text.indexOf(seg.text, cursor) : -1;
    if (at < 0) found = false;
    else cursor = at + seg.text.length;
    let status = "unheard";
    let heardChars = 0;
    if (played >= end && end > seg.start_sample) {
      status = "heard";
      heardChars = seg.text.length;
    } else if (played > seg.start_sample) {
      status = "partial";
      const fraction = (played - seg.start_sample) / Math.max(1, end - seg.start_sample);
      heardChars = seg.words
        ? startedWordsEnd(seg.text, seg.words, played)
        : wordEnd(seg.text, Math.floor(fraction * seg.text.length));
    }
    if (heardChars > 0) {
      heard.push(seg.text.slice(0, heardChars));
      if (at >= 0) heardEnd = at + heardChars;
    }
    out.push({ text: seg.text, start_sample: seg.start_sample, status, heardChars });
  });
  return {
    segments: out,
    heardText: heard.join(" "),
    heardEnd: found ? heardEnd : -1,
  };
}

/** The end in `text` of the last of `words` ({text, start_sample}) that started before `played`. */
function startedWordsEnd(text, words, played) {
  let end = 0;
  for (const word of words) {
    if (word.start_sample >= played) break;
    const at = text.indexOf(word.text, end);
    if (at < 0) break;
    end = at + word.text.length;
  }
  return end;
}

/** The end of the last whole word at or before `index` (0 if there is none). */
function wordEnd(text, index) {
  if (index >= text.length) return text.length;
  if (/\s/u.test(text[index])) return text.slice(0, index).trimEnd().length;
  const space = text.lastIndexOf(" ", index);
  return space < 0 ? 0 : text.slice(0, space).trimEnd().length;
}

/** Text in pieces of at most `max` code points, cut after whitespace where there is some. */
export function chunkText(text, max) {
  const chars = Array.from(text);
  const chunks = [];
  let start = 0;
  while (start < chars.length) {
    let end = Math.min(start + max, chars.length);
    if (end < chars.length) {
      let cut = end;
      while (cut > start && !/\s/u.test(chars[cut - 1])) cut--;
      if (cut > start) end = cut;
    }
    chunks.push(chars.slice(start, end).join(""));
    start = end;
  }
  return chunks;
}

/** Length in Unicode code points, as the server counts text (JavaScript's .length is UTF-16). */
export function codePoints(text) {
  let n = 0;
  for (const _ of text) n++;
  return n;
}
