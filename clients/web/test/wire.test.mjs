// Unit tests of the web client's pure helpers and the vendored msgpack build, with Node's
// own test runner (no npm install): node --test clients/web/test/
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { test } from "node:test";

// The page loads vendor/msgpack.min.js as a classic script (it sets globalThis.MessagePack);
// under Node the same UMD file is a CommonJS module.
const require = createRequire(import.meta.url);
globalThis.MessagePack = require("../vendor/msgpack.min.js");
const { chunkText, codePoints, decodeFrame, heardSummary, pcm16ToFloat32, realtimeUrl, tokenize } =
  await import("../wire.js");

// voicews.protocol.encode_frame(AudioFrame("t-42", 3, 2646, pcm)) with the PCM samples
// 0, 1, -1, 32767, -32768, as the server sends it.
const GOLDEN_FRAME =
  "84a77475726e5f6964a4742d3432a373657103ac73746172745f73616d706c65cd0a56a370636dc40a" +
  "00000100ffffff7f0080";

const hex = (s) => Uint8Array.from(s.match(/../g), (b) => parseInt(b, 16));

test("decodes the server's audio frame", () => {
  const frame = decodeFrame(hex(GOLDEN_FRAME).buffer);
  assert.equal(frame.turnId, "t-42");
  assert.equal(frame.seq, 3);
  assert.equal(frame.startSample, 2646);
  assert.deepEqual(Array.from(frame.samples), [0, 1 / 32768, -1 / 32768, 32767 / 32768, -1]);
});

test("PCM at an odd offset in its buffer", () => {
  const bytes = new Uint8Array([9, 0x34, 0x12, 0xcc, 0xed]).subarray(1);
  assert.deepEqual(Array.from(pcm16ToFloat32(bytes)), [0x1234 / 32768, -0x1234 / 32768]);
});

test("realtime URL from the page's location", () => {
  const loc = (href) => new URL(href);
  assert.equal(realtimeUrl(loc("http://127.0.0.1:8765/")), "ws://127.0.0.1:8765/v1/realtime");
  assert.equal(
    realtimeUrl(loc("https://tts.example/index.html?token=a b&x=1")),
    "wss://tts.example/v1/realtime?token=a%20b",
  );
  assert.equal(
    realtimeUrl(loc("http://127.0.0.1:8765/?token=t"), 48000),
    "ws://127.0.0.1:8765/v1/realtime?token=t&sample_rate=48000",
  );
  assert.equal(
    realtimeUrl(loc("http://127.0.0.1:8765/"), 48000),
    "ws://127.0.0.1:8765/v1/realtime?sample_rate=48000",
  );
});

test("decodes the golden PCM16 frames of protocol/examples", () => {
  const examples = new URL("../../../protocol/examples/", import.meta.url);
  const golden = JSON.parse(readFileSync(new URL("frames.json", examples), "utf8"));
  const pcm16 = golden.frames.filter((f) => f.format === "pcm_s16le");
  assert.ok(pcm16.length >= 3);
  for (const f of pcm16) {
    const frame = decodeFrame(readFileSync(new URL(f.file, examples)));
    assert.equal(frame.turnId, f.turn_id);
    assert.equal(frame.startSample, f.start_sample);
    assert.deepEqual(Array.from(frame.samples), f.values.map((v) => v / 32768));
  }
});

test("tokens join back to the text", () => {
  for (const text of [
    "Hello there, how are you today?",
    "  leading and trailing  ",
    "Numbers: $1,249.99 at 10:30, e.g. 60%!",
    "Emoji 👋🏽 and naïve café — ok.",
    "",
  ]) {
    const tokens = tokenize(text);
    assert.equal(tokens.join(""), text);
    for (const t of tokens) assert.ok(t.trim().length <= 4 || !t.trim(), t);
  }
  assert.deepEqual(tokenize("Hello, world"), ["Hell", "o", ",", " worl", "d"]);
});

test("chunks keep words whole and count code points", () => {
  const text = "one two three four five six";
  const chunks = chunkText(text, 10);
  assert.equal(chunks.join(""), text);
  assert.ok(chunks.every((c) => codePoints(c) <= 10));
  assert.deepEqual(chunkText("abcdefghij", 4), ["abcd", "efgh", "ij"]);
  assert.equal(codePoints("👋a"), 2);
});

test("heard text from segments and played samples", () => {
  const text = "Hello there, how are you today? Fine.";
  const segments = [
    { text: "Hello there,", start_sample: 0 },
    { text: "how are you today?", start_sample: 1000 },
    { text: "Fine.", start_sample: 3000 },
  ];
  const none = heardSummary(text, segments, 0, 4000);
  assert.deepEqual(none.segments.map((s) => s.status), ["unheard", "unheard", "unheard"]);
  assert.equal(none.heardText, "");

  const half = heardSummary(text, segments, 2000, 4000);
  assert.deepEqual(half.segments.map((s) => s.status), ["heard", "partial", "unheard"]);
  assert.equal(half.heardText, "Hello there, how are");
  assert.equal(text.slice(0, half.heardEnd), "Hello there, how are");

  const all = heardSummary(text, segments, 4000, 4000);
  assert.ok(all.segments.every((s) => s.status === "heard"));
  assert.equal(all.heardEnd, text.length);
});

test("placed words say exactly how far into a segment the listener got", () => {
  const text = "Hello there, how are you today? Fine.";
  const words = [
    { text: "how", start_sample: 1010 },
    { text: "are", start_sample: 1300 },
    { text: "you", start_sample: 1900 },
    { text: "today?", start_sample: 2500 },
  ];
  const segments = [
    { text: "Hello there,", start_sample: 0 },
    { text: "how are you today?", start_sample: 1000, words },
    { text: "Fine.", start_sample: 3000 },
  ];
  // By time alone, 1950 of 1000-3000 would be "how are"; "you" has started, so it was heard.
  const cut = heardSummary(text, segments, 1950, 4000);
  assert.deepEqual(cut.segments.map((s) => s.status), ["heard", "partial", "unheard"]);
  assert.equal(cut.heardText, "Hello there, how are you");
  assert.equal(text.slice(0, cut.heardEnd), "Hello there, how are you");
  assert.equal(heardSummary(text, segments, 1005, 4000).heardText, "Hello there,");
});
