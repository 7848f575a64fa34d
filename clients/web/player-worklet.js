// The player: a jitter buffer drained on the audio thread, one render quantum at a time.
//
// Playback is clocked by the audio device, never by timers, so consecutive frames join
// without gaps. The page posts PCM (as floats at the server's rate) for the current turn; the
// player starts once `prebufferMs` are buffered (or the turn's audio is complete), counts an
// underrun whenever it runs dry after the turn's first audio while more is still due, and
// then buffers up again, to twice as much as before (at most 4 × prebufferMs). If the context runs at another rate than the server, it resamples
// by linear interpolation. Counts are in samples at the server's rate, from the turn start.
//
// Page -> player: {type: "turn", turnId}  start a turn: flush everything, reset counters
//                 {type: "pcm", turnId, startSample, samples}  audio (frames of other turns
//                                                          are dropped)
//                 {type: "end", turnId}   no more audio comes for the turn: play out the rest
//                 {type: "stop"}          barge-in: flush at once, accept nothing until "turn"
// Player -> page: {type: "status", ...}   about every 45 ms, and on every change of state
//                 {type: "started"|"underrun"|"drained"|"flushed", ...status}

const STATUS_EVERY = 8; // render quanta between status messages

class VoicewsPlayer extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const opts = options.processorOptions ?? {};
    this.inputRate = opts.inputRate ?? sampleRate;
    this.step = this.inputRate / sampleRate; // input samples per output sample
    this.prebuffer = Math.max(1, Math.round((this.inputRate * (opts.prebufferMs ?? 80)) / 1000));
    this.buffer = new Float32Array(1 << 16);
    this.mask = this.buffer.length - 1;
    this.quanta = 0;
    this.reset(null);
    this.port.onmessage = (event) => this.onMessage(event.data);
  }

  reset(turnId) {
    this.turnId = turnId;
    this.read = 0; // samples of the turn played (absolute index into the turn)
    this.write = 0; // samples of the turn received
    this.frac = 0; // resampling phase between read and read + 1
    this.ended = false;
    this.playing = false;
    this.started = false;
    this.drained = false;
    this.underruns = 0;
    this.target = this.prebuffer; // samples to buffer before (re)starting
    this.gaps = 0; // frames whose start_sample did not follow the previous frame
  }

  onMessage(msg) {
    switch (msg.type) {
      case "turn":
        this.reset(msg.turnId);
        this.post("status");
        break;
      case "pcm":
        if (msg.turnId !== this.turnId || this.ended) return;
        if (msg.startSample !== this.write) this.gaps++;
        this.append(msg.samples);
        break;
      case "end":
        if (msg.turnId !== this.turnId) return;
        this.ended = true;
        if (this.write === this.read && !this.drained) this.finish();
        break;
      case "stop": {
        const turnId = this.turnId;
        const discarded = this.write - this.read;
        this.write = this.read;
        this.playing = false;
        this.turnId = null;
        this.post("flushed", { turnId, discarded });
        break;
      }
    }
  }

  append(samples) {
    const buffered = this.write - this.read;
    if (buffered + samples.length > this.buffer.length) this.grow(buffered + samples.length);
    for (let i = 0; i < samples.length; i++) this.buffer[(this.write + i) & this.mask] = samples[i];
    this.write += samples.length;
  }

  grow(needed) {
    let size = this.buffer.length * 2;
    while (size < needed) size *= 2;
    const bigger = new Float32Array(size);
    for (let i = this.read; i < this.write; i++) bigger[i & (size - 1)] = this.buffer[i & this.mask];
    this.buffer = bigger;
    this.mask = size - 1;
  }

  finish() {
    this.drained = true;
    this.playing = false;
    this.post("drained");
  }

  process(_inputs, outputs) {
    const channels = outputs[0];
    const out = channels[0];
    const n = out.length;
    let i = 0;
    if (!this.playing && this.turnId !== null && !this.drained) {
      const buffered = this.write - this.read;
      if (buffered >= this.target || (this.ended && buffered > 0)) {
        this.playing = true;
        if (!this.started) {
          this.started = true;
          this.post("started");
        }
      }
    }
    if (this.playing) {
      i = this.step === 1 ? this.copy(out, n) : this.resample(out, n);
      if (i < n) {
        // Ran dry within this quantum.
        this.playing = false;
        if (this.ended) this.finish();
        else {
          this.underruns++;
          this.target = Math.min(2 * this.target, 4 * this.prebuffer);
          this.post("underrun");
        }
      }
    }
    out.fill(0, i);
    for (let c = 1; c < channels.length; c++) channels[c].set(out);
    if (++this.quanta % STATUS_EVERY === 0) this.post("status");
    return true;
  }

  copy(out, n) {
    const count = Math.min(n, this.write - this.read);
    for (let i = 0; i < count; i++) out[i] = this.buffer[(this.read + i) & this.mask];
    this.read += count;
    return count;
  }

  resample(out, n) {
    let i = 0;
    while (i < n && this.read < this.write) {
      const last = this.read + 1 >= this.write;
      if (last && !this.ended) break; // the next sample is needed to interpolate
      const s0 = this.buffer[this.read & this.mask];
      const s1 = last ? s0 : this.buffer[(this.read + 1) & this.mask];
      out[i++] = s0 + (s1 - s0) * this.frac;
      this.frac += this.step;
      const advance = Math.floor(this.frac);
      this.frac -= advance;
      this.read = Math.min(this.read + advance, this.write);
    }
    return i;
  }

  post(type, extra = {}) {
    this.port.postMessage({
      type,
      turnId: this.turnId,
      played: this.read,
      received: this.write,
      bufferedMs: ((this.write - this.read) * 1000) / this.inputRate,
      underruns: this.underruns,
      playing: this.playing,
      drained: this.drained,
      gaps: this.gaps,
      time: currentTime,
      ...extra,
    });
  }
}

registerProcessor("voicews-player", VoicewsPlayer);
