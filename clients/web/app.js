// The voicews web client: streams text into /v1/realtime and plays the PCM that comes back.
//
// Plain ES module, no build step. Audio frames are decoded with the vendored @msgpack/msgpack
// (wire.js) and handed to an AudioWorklet (player-worklet.js), which plays them from a jitter
// buffer on the audio clock. `window.voicews` is a small hook for tests and the console.

import { chunkText, codePoints, decodeFrame, heardSummary, realtimeUrl, tokenize } from "./wire.js";

const PREBUFFER_MS = 80;
// ?context_rate=48000 forces the AudioContext's rate, so the worklet resamples (for testing).
const FORCED_CONTEXT_RATE = Number(new URLSearchParams(location.search).get("context_rate")) || null;
const WHOLE_TEXT_CHUNK = 500; // "all at once" sends text in deltas of at most this many chars
const BACKLOG_MARGIN = 0.9; // keep unspoken text under this share of max_pending_text_chars
const SAMPLE_TEXT =
  "Thanks for calling. I can help you with that order today. " +
  "It shipped yesterday afternoon from our warehouse in Denver, and the carrier expects " +
  "to deliver it by Thursday, the twelfth, before six in the evening. " +
  "If nobody is home, the driver will leave it with a neighbour or at the front desk. " +
  "Is there anything else I can do for you while I have you on the line?";

const $ = (id) => document.getElementById(id);
const ui = {
  connection: $("connection"),
  connect: $("connect"),
  text: $("text"),
  rate: $("rate"),
  rateValue: $("rate-value"),
  speed: $("speed"),
  speedValue: $("speed-value"),
  outputRate: $("output-rate"),
  speak: $("speak"),
  stop: $("stop"),
  sample: $("sample"),
  ttfa: $("m-ttfa"),
  ttfp: $("m-ttfp"),
  buffered: $("m-buffered"),
  underruns: $("m-underruns"),
  received: $("m-received"),
  played: $("m-played"),
  rtt: $("m-rtt"),
  audio: $("m-audio"),
  wave: $("wave"),
  bufferFill: $("buffer-fill"),
  heardStatus: $("heard-status"),
  heard: $("heard"),
  log: $("log"),
};

// --- state ------------------------------------------------------------------------------

const conn = {
  ws: null,
  ready: null,
  connected: false,
  sessionId: null,
  sampleRate: null,
  limits: null,
  pings: new Map(),
  rttMs: null,
  closed: null, // {code, reason} of the last close
};
const audio = { ctx: null, node: null, analyser: null, inputRate: null, pending: null };
const errors = []; // every `error` event of the session: {code, message, turn_id}
let turnCounter = 0;
let pingCounter = 0;
let turn = newTurn(null, "");

function newTurn(id, text) {
  return {
    id,
    text,
    accepting: id !== null, // frames of this turn go to the player
    sending: false,
    sentChars: 0, // UTF-16 length of text sent so far
    spokenEnd: 0, // where the latest `segment` ends in `text`
    t0: null, // performance.now() of the first text delta
    firstAudioMs: null,
    firstPlayMs: null,
    playStartedAt: null,
    drainedAt: null,
    samplesReceived: 0,
    samplesPlayed: 0,
    bufferedMs: 0,
    underruns: 0,
    lateUnderruns: 0, // underruns where the audio had not reached the page either
    arrivals: new Map(), // frame start_sample -> audio clock when the frame reached the page
    playing: false,
    drained: false,
    gaps: 0,
    framesDropped: 0,
    segments: [],
    turnDone: null,
    stopped: false,
    stoppedAt: null,
    onFlushed: null,
    wavePeak: 0,
  };
}

// --- connection -------------------------------------------------------------------------

function connect() {
  if (conn.ws && conn.ws.readyState <= WebSocket.OPEN) return conn.ready;
  const ws = new WebSocket(realtimeUrl(location, Number(ui.outputRate.value) || null));
  ws.binaryType = "arraybuffer";
  conn.ws = ws;
  setConnection("connecting…", "");
  let resolve, reject;
  conn.ready = new Promise((res, rej) => {
    resolve = res;
    reject = rej;
  });
  conn.ready.catch(() => {}); // callers that care await it; nobody else should see a rejection
  conn.resolveReady = resolve;
  ws.onmessage = (event) => {
    if (ws !== conn.ws) return;
    if (typeof event.data === "string") onEvent(JSON.parse(event.data));
    else onFrame(event.data);
  };
  ws.onclose = (event) => {
    if (ws !== conn.ws) return;
    conn.connected = false;
    conn.closed = { code: event.code, reason: event.reason };
    const why = event.code === 1006 ? "connection failed or refused" : event.reason || "closed";
    setConnection(`disconnected (${event.code}: ${why})`, "bad");
    log(`socket closed ${event.code} ${event.reason}`, "error");
    ui.connect.hidden = false;
    reject(new Error(`connection closed (${event.code})`));
    if (turn.accepting) {
      // Nothing more will come: let the player play out what it has.
      turn.accepting = false;
      audio.node?.port.postMessage({ type: "end", turnId: turn.id });
    }
  };
  return conn.ready;
}

function send(message) {
  const ws = conn.ws;
  if (!ws || ws.readyState !== WebSocket.OPEN) throw new Error("not connected");
  ws.send(JSON.stringify(message));
}

function ping() {
  const id = `p${++pingCounter}`;
  conn.pings.set(id, performance.now());
  send({ type: "ping", id });
}

function onEvent(event) {
  switch (event.type) {
    case "session_created":
      conn.connected = true;
      conn.sessionId = event.session_id;
      conn.sampleRate = event.audio.sample_rate;
      conn.limits = event.limits;
      setConnection(`connected · ${event.audio.sample_rate} Hz`, "ok");
      ui.connect.hidden = true;
      log(`session_created ${event.session_id} (${event.audio.sample_rate} Hz)`);
      if (Number(ui.speed.value) !== 1) sendSpeed();
      ping();
      conn.resolveReady();
      break;
    case "turn_started":
      log(`turn_started ${event.turn_id}`);
      break;
    case "segment":
      if (event.turn_id !== turn.id || !turn.accepting) return;
      turn.segments.push({ text: event.text, start_sample: event.start_sample });
      {
        const at = turn.text.indexOf(event.text, turn.spokenEnd);
        if (at >= 0) turn.spokenEnd = at + event.text.length;
      }
      log(`segment @${event.start_sample}: ${event.text}`);
      break;
    case "words": {
      // The placed words of the latest segment (sent after its `segment` event).
      const seg = turn.segments[turn.segments.length - 1];
      if (event.turn_id !== turn.id || !turn.accepting || !seg) return;
      seg.words = event.words;
      break;
    }
    case "turn_done":
      log(`turn_done ${event.turn_id} samples=${event.samples} cancelled=${event.cancelled}`);
      if (event.turn_id !== turn.id) return;
      turn.turnDone = {
        samples: event.samples,
        cancelled: event.cancelled,
        heardText: event.heard_text ?? null,
      };
      if (turn.accepting) {
        turn.accepting = false;
        audio.node?.port.postMessage({ type: "end", turnId: turn.id });
      }
      break;
    case "error":
      errors.push({ code: event.code, message: event.message, turn_id: event.turn_id ?? null });
      log(`error ${event.code}: ${event.message}`, "error");
      break;
    case "pong": {
      const sent = conn.pings.get(event.id);
      if (sent !== undefined) {
        conn.pings.delete(event.id);
        conn.rttMs = performance.now() - sent;
      }
      break;
    }
    default:
      break; // newer server: unknown events are ignored (protocol §11)
  }
}

function onFrame(data) {
  const frame = decodeFrame(data);
  if (!turn.accepting || frame.turnId !== turn.id || !audio.node) {
    turn.framesDropped++; // a turn we cut or replaced (protocol §7)
    return;
  }
  if (turn.samplesReceived === 0) turn.firstAudioMs = performance.now() - turn.t0;
  if (frame.startSample !== turn.samplesReceived) {
    turn.gaps++;
    log(`frame ${frame.seq} starts at ${frame.startSample}, expected ${turn.samplesReceived}`, "error");
  }
  turn.samplesReceived += frame.samples.length;
  turn.arrivals.set(frame.startSample, audio.ctx.currentTime);
  audio.node.port.postMessage(
    { type: "pcm", turnId: frame.turnId, startSample: frame.startSample, samples: frame.samples },
    [frame.samples.buffer],
  );
}

/** The output rate is chosen at connect (a query parameter): a new choice reconnects. */
function reconnect() {
  if (turn.accepting) stop();
  const old = conn.ws;
  conn.ws = null;
  old?.close(1000, "output rate changed");
  log(`output rate: ${ui.outputRate.value === "0" ? "the voice's own" : `${ui.outputRate.value} Hz`}`);
  connect().catch(() => {});
}

function sendSpeed() {
  if (!conn.connected) return;
  send({ type: "session_update", speed: Number(ui.speed.value) });
}

// --- audio ------------------------------------------------------------------------------

async function ensureAudio(rate) {
  if (audio.pending) await audio.pending;
  if (audio.ctx && audio.inputRate === rate) {
    if (audio.ctx.state === "suspended") audio.ctx.resume().catch(() => {});
    return;
  }
  audio.pending = createAudio(rate);
  try {
    await audio.pending;
  } finally {
    audio.pending = null;
  }
}

async function createAudio(rate) {
  if (audio.ctx) await audio.ctx.close();
  let ctx;
  try {
    ctx = new AudioContext({ sampleRate: FORCED_CONTEXT_RATE ?? rate, latencyHint: "interactive" });
  } catch {
    ctx = new AudioContext({ latencyHint: "interactive" }); // the worklet resamples
  }
  await ctx.audioWorklet.addModule(new URL("player-worklet.js", import.meta.url));
  const node = new AudioWorkletNode(ctx, "voicews-player", {
    numberOfInputs: 0,
    numberOfOutputs: 1,
    outputChannelCount: [1],
    processorOptions: { inputRate: rate, prebufferMs: PREBUFFER_MS },
  });
  const analyser = ctx.createAnalyser();
  analyser.fftSize = 1024;
  node.connect(analyser);
  analyser.connect(ctx.destination);
  node.port.onmessage = (event) => onPlayer(event.data);
  Object.assign(audio, { ctx, node, analyser, inputRate: rate });
  if (ctx.state === "suspended") ctx.resume().catch(() => {});
  log(`audio context ${ctx.sampleRate} Hz${ctx.sampleRate === rate ? "" : `, resampling from ${rate} Hz`}`);
}

function onPlayer(msg) {
  if (msg.type === "flushed") {
    if (msg.turnId === turn.id || (msg.turnId === null && turn.stopped)) {
      turn.samplesPlayed = msg.played;
      turn.bufferedMs = 0;
      turn.playing = false;
      turn.onFlushed?.();
    }
    return;
  }
  if (msg.turnId !== turn.id || msg.turnId === null) return;
  turn.samplesPlayed = msg.played;
  turn.bufferedMs = msg.bufferedMs;
  turn.underruns = msg.underruns;
  turn.playing = msg.playing;
  turn.drained = msg.drained;
  if (msg.type === "started") {
    turn.playStartedAt = performance.now();
    turn.firstPlayMs = turn.playStartedAt - turn.t0;
  } else if (msg.type === "underrun") {
    // Late delivery (server, network or a busy page) if the next frame reached the page only
    // after the player ran dry; otherwise the player starved with the audio at hand. Both
    // times are on the audio clock, which advances a device callback (baseLatency) at a time.
    const arrived = turn.arrivals.get(msg.received);
    const slack = (audio.ctx.baseLatency || 0.02) + 128 / audio.ctx.sampleRate + 0.005;
    const late = arrived === undefined || arrived >= msg.time - slack;
    if (late) turn.lateUnderruns++;
    const why = late ? "audio arrived late" : "audio was at the page";
    log(`underrun after ${msg.played} samples (${why})`, "error");
  } else if (msg.type === "drained") {
    turn.drainedAt = performance.now();
    log(`played to the end: ${msg.played} samples`);
  }
}

// --- turns ------------------------------------------------------------------------------

/** Speak `text`: streamed as LLM tokens at `rate` tokens/s, or all at once if rate is 0. */
async function speak(text, rate = 0) {
  text = String(text ?? "");
  if (!text.trim()) throw new Error("nothing to speak");
  await connect();
  await ensureAudio(conn.sampleRate);
  const max = conn.limits?.max_turn_text_chars ?? Infinity;
  if (codePoints(text) > max) throw new Error(`text is longer than the server's ${max} characters`);
  const id = `t${Date.now().toString(36)}-${++turnCounter}`;
  turn = newTurn(id, text);
  if (ui.text.value !== text) ui.text.value = text;
  renderHeard();
  audio.node.port.postMessage({ type: "turn", turnId: id });
  send({ type: "turn_reset", turn_id: id });
  ping();
  const pieces = rate > 0 ? tokenize(text) : chunkText(text, WHOLE_TEXT_CHUNK);
  const interval = rate > 0 ? 1000 / rate : 0;
  const current = () => turn.id === id && !turn.stopped && conn.connected;
  turn.sending = true;
  try {
    const start = performance.now();
    for (let i = 0; i < pieces.length; i++) {
      const wait = start + i * interval - performance.now();
      if (wait > 0) await sleep(wait);
      await roomFor(pieces[i], current);
      if (!current()) return;
      send({ type: "text_delta", text: pieces[i] });
      if (turn.t0 === null) turn.t0 = performance.now();
      turn.sentChars += pieces[i].length;
    }
    if (current()) send({ type: "end_text" });
  } finally {
    if (turn.id === id) turn.sending = false;
  }
}

/** Backpressure: wait while the text the server has not started speaking is near its limit. */
async function roomFor(piece, current) {
  const limit = (conn.limits?.max_pending_text_chars ?? Infinity) * BACKLOG_MARGIN;
  while (current()) {
    const unspoken = codePoints(turn.text.slice(turn.spokenEnd, turn.sentChars));
    if (unspoken + codePoints(piece) <= limit || unspoken === 0) return;
    await sleep(50);
  }
}

/** Barge-in: flush the player at once, cut the turn on the server, report what was heard. */
async function stop() {
  const t = turn;
  if (t.id === null || t.stopped || t.drained) return heard();
  t.stopped = true;
  t.stoppedAt = performance.now();
  t.accepting = false;
  t.sending = false;
  const flushed = new Promise((resolve) => {
    t.onFlushed = resolve;
    setTimeout(resolve, 1000); // a closed audio context never answers
  });
  audio.node?.port.postMessage({ type: "stop" });
  if (t.turnDone === null && conn.connected) {
    // Tell the server how far playback got, so its turn_done says what was heard; cancel
    // then cuts the turn without starting another.
    send({ type: "playback", turn_id: t.id, samples_played: t.samplesPlayed });
    send({ type: "cancel" });
  }
  await flushed;
  log(`stopped after ${t.samplesPlayed} samples played`);
  renderHeard();
  return heard();
}

function heard() {
  const total = turn.turnDone?.samples ?? turn.samplesReceived;
  return heardSummary(turn.text, turn.segments, turn.samplesPlayed, total);
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// --- rendering --------------------------------------------------------------------------

function setConnection(text, cls) {
  ui.connection.textContent = text;
  ui.connection.className = `pill ${cls}`;
}

function log(text, cls = "") {
  const item = document.createElement("li");
  item.textContent = `${(performance.now() / 1000).toFixed(3)} ${text}`;
  if (cls) item.className = cls;
  ui.log.append(item);
  while (ui.log.childElementCount > 300) ui.log.firstElementChild.remove();
}

const ms = (value) => (value === null ? "–" : `${Math.round(value)} ms`);
const seconds = (samples) => (conn.sampleRate ? `${(samples / conn.sampleRate).toFixed(2)} s` : "–");

function setText(element, text) {
  if (element.textContent !== text) element.textContent = text;
}

function renderMeters() {
  setText(ui.ttfa, ms(turn.firstAudioMs));
  setText(ui.ttfp, ms(turn.firstPlayMs));
  setText(ui.buffered, turn.id ? ms(turn.bufferedMs) : "–");
  const late = turn.lateUnderruns;
  setText(ui.underruns, late > 0 ? `${turn.underruns} (${late} late)` : String(turn.underruns));
  ui.underruns.classList.toggle("warn", turn.underruns > 0);
  setText(ui.received, turn.id ? seconds(turn.samplesReceived) : "–");
  setText(ui.played, turn.id ? seconds(turn.samplesPlayed) : "–");
  setText(ui.rtt, ms(conn.rttMs));
  const ctx = audio.ctx;
  setText(ui.audio, !ctx ? "–" : ctx.state === "running" ? `${ctx.sampleRate} Hz` : ctx.state);
  const fill = `${Math.min(100, turn.bufferedMs / 10).toFixed(1)}%`; // full at 1 s
  if (ui.bufferFill.style.width !== fill) ui.bufferFill.style.width = fill;
  const live = turn.id !== null && !turn.stopped && !turn.drained;
  if (ui.stop.disabled === live) ui.stop.disabled = !live;
}

let heardKey = "";

function renderHeard() {
  const placed = turn.segments.filter((s) => s.words).length;
  const key = `${turn.id}|${turn.samplesPlayed}|${turn.segments.length}|${placed}|${turn.stopped}|${turn.drained}`;
  if (key === heardKey) return;
  heardKey = key;
  const summary = heard();
  const text = turn.text;
  ui.heard.replaceChildren();
  if (turn.id === null) return;
  const rest = turn.stopped ? "unheard" : "upcoming";
  if (summary.heardEnd >= 0) {
    const mark = document.createElement("mark");
    mark.textContent = text.slice(0, summary.heardEnd);
    const after = document.createElement("span");
    after.className = rest;
    after.textContent = text.slice(summary.heardEnd);
    ui.heard.append(mark, after);
  } else {
    const mark = document.createElement("mark");
    mark.textContent = summary.heardText;
    ui.heard.append(mark);
  }
  const full = summary.segments.filter((s) => s.status === "heard").length;
  const partial = summary.segments.some((s) => s.status === "partial");
  const seg = `${full} of ${summary.segments.length} segments${partial ? " and part of one more" : ""}`;
  if (turn.stopped) {
    ui.heardStatus.textContent = `Stopped after ${seconds(turn.samplesPlayed)}: heard ${seg}.`;
  } else if (turn.drained) {
    ui.heardStatus.textContent = `Played to the end: ${seconds(turn.samplesPlayed)}, ${seg}.`;
  } else {
    ui.heardStatus.textContent = turn.samplesPlayed > 0 ? "Playing…" : "Waiting for audio…";
  }
}

const wave = { columns: null, tmp: null, quiet: 0, colors: null };
const darkScheme = matchMedia("(prefers-color-scheme: dark)");
darkScheme.addEventListener("change", () => {
  wave.colors = null;
  wave.quiet = 0;
});

function renderWave() {
  const canvas = ui.wave;
  const dpr = window.devicePixelRatio || 1;
  const width = Math.max(1, Math.round(canvas.clientWidth * dpr));
  const height = Math.max(1, Math.round(canvas.clientHeight * dpr));
  if (canvas.width !== width || canvas.height !== height) {
    canvas.width = width;
    canvas.height = height;
    wave.quiet = 0;
  }
  const columns = Math.max(1, Math.floor(width / (2 * dpr)));
  if (!wave.columns || wave.columns.length !== columns * 2) wave.columns = new Float32Array(columns * 2);
  // Scroll one column per animation frame: the min and max of the analyser's window.
  let lo = 0;
  let hi = 0;
  if (audio.analyser) {
    if (!wave.tmp) wave.tmp = new Float32Array(audio.analyser.fftSize);
    audio.analyser.getFloatTimeDomainData(wave.tmp);
    for (const v of wave.tmp) {
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    if (turn.playing) turn.wavePeak = Math.max(turn.wavePeak, hi, -lo);
  }
  // Once silence has scrolled across the whole canvas, there is nothing new to draw.
  wave.quiet = lo === 0 && hi === 0 ? wave.quiet + 1 : 0;
  if (wave.quiet > columns + 1) return;
  wave.columns.copyWithin(0, 2);
  wave.columns[columns * 2 - 2] = lo;
  wave.columns[columns * 2 - 1] = hi;
  if (!wave.colors) {
    const style = getComputedStyle(document.documentElement);
    wave.colors = { line: style.getPropertyValue("--line"), wave: style.getPropertyValue("--wave") };
  }
  const g = canvas.getContext("2d");
  g.clearRect(0, 0, width, height);
  g.fillStyle = wave.colors.line;
  g.fillRect(0, Math.floor(height / 2), width, Math.max(1, dpr));
  g.fillStyle = wave.colors.wave;
  const step = width / columns;
  const mid = height / 2;
  for (let c = 0; c < columns; c++) {
    const top = mid - wave.columns[2 * c + 1] * mid;
    const bottom = mid - wave.columns[2 * c] * mid;
    g.fillRect(c * step, top, Math.max(1, step - dpr), Math.max(dpr, bottom - top));
  }
}

function frame() {
  renderMeters();
  renderHeard();
  renderWave();
  requestAnimationFrame(frame);
}

// --- wiring -----------------------------------------------------------------------------

function snapshot() {
  return {
    connected: conn.connected,
    sessionId: conn.sessionId,
    sampleRate: conn.sampleRate,
    contextRate: audio.ctx?.sampleRate ?? null,
    contextState: audio.ctx?.state ?? null,
    rttMs: conn.rttMs,
    closed: conn.closed,
    errors: errors.slice(),
    turnId: turn.id,
    sending: turn.sending,
    samplesReceived: turn.samplesReceived,
    samplesPlayed: turn.samplesPlayed,
    bufferedMs: turn.bufferedMs,
    underruns: turn.underruns,
    lateUnderruns: turn.lateUnderruns,
    playing: turn.playing,
    drained: turn.drained,
    firstAudioMs: turn.firstAudioMs,
    firstPlayMs: turn.firstPlayMs,
    playStartedAt: turn.playStartedAt,
    drainedAt: turn.drainedAt,
    gaps: turn.gaps,
    framesDropped: turn.framesDropped,
    segments: turn.segments.slice(),
    turnDone: turn.turnDone,
    stopped: turn.stopped,
    wavePeak: turn.wavePeak,
    heard: heard(),
  };
}

function uiSpeak() {
  const source = document.querySelector('input[name="source"]:checked').value;
  const rate = source === "llm" ? Number(ui.rate.value) : 0;
  speak(ui.text.value, rate).catch((err) => {
    ui.heardStatus.textContent = `Could not speak: ${err.message}`;
    log(`speak failed: ${err.message}`, "error");
  });
}

ui.text.value = SAMPLE_TEXT;
ui.speak.addEventListener("click", uiSpeak);
ui.stop.addEventListener("click", () => stop());
ui.sample.addEventListener("click", () => {
  ui.text.value = SAMPLE_TEXT;
  ui.text.focus();
});
ui.connect.addEventListener("click", () => connect().catch(() => {}));
ui.text.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    uiSpeak();
  }
});
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && !ui.stop.disabled) stop();
});
ui.rate.addEventListener("input", () => {
  ui.rateValue.textContent = `${ui.rate.value} tokens/s`;
});
ui.speed.addEventListener("input", () => {
  ui.speedValue.textContent = `${Number(ui.speed.value).toFixed(2)}×`;
});
ui.speed.addEventListener("change", sendSpeed);
ui.outputRate.addEventListener("change", reconnect);
{
  // ?sample_rate=48000 preselects an output rate (for links and tests).
  const asked = new URLSearchParams(location.search).get("sample_rate");
  if (asked && [...ui.outputRate.options].some((o) => o.value === asked)) ui.outputRate.value = asked;
}

window.voicews = {
  get state() {
    return snapshot();
  },
  connect: () => connect().then(snapshot),
  speak: (text, rate = 0) => speak(text, rate).then(snapshot),
  stop,
  sampleText: SAMPLE_TEXT,
};

connect().catch(() => {});
requestAnimationFrame(frame);
