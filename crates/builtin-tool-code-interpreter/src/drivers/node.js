// Toolhost's Node.js driver: one persistent context, one JSON request per line on standard
// input, one JSON reply per line on standard output (what the code logs is captured per run).
"use strict";
const vm = require("vm");
const util = require("util");
const fs = require("fs");
const readline = require("readline");
const { createRequire } = require("module");
const path = require("path");

const SPILL_CAP = 64 * 1024 * 1024;
const out = process.stdout;

class Capture {
  constructor(budget, spill) {
    this.half = Math.max(Math.floor(budget / 2), 256);
    this.head = "";
    this.tail = "";
    this.total = 0;
    this.spillPath = spill || null;
    this.spillFd = null;
    this.spilled = 0;
  }
  write(text) {
    this.total += text.length;
    if (this.spillPath && this.spilled < SPILL_CAP) {
      try {
        if (this.spillFd === null) this.spillFd = fs.openSync(this.spillPath, "w", 0o600);
        const part = text.slice(0, SPILL_CAP - this.spilled);
        fs.writeSync(this.spillFd, part);
        this.spilled += part.length;
      } catch (e) {
        this.spillPath = null;
      }
    }
    if (this.head.length < this.half) {
      const part = text.slice(0, this.half - this.head.length);
      this.head += part;
      text = text.slice(part.length);
    }
    if (text) {
      this.tail += text;
      if (this.tail.length > 2 * this.half) this.tail = this.tail.slice(-this.half);
    }
  }
  result() {
    const tail = this.tail.length > this.half ? this.tail.slice(-this.half) : this.tail;
    const dropped = this.total - this.head.length - tail.length;
    if (this.spillFd !== null) fs.closeSync(this.spillFd);
    const spill = dropped > 0 && this.spillFd !== null ? this.spillPath : null;
    return { head: this.head, tail, dropped, spill };
  }
}

let capture = null;
const log = (...args) => capture && capture.write(util.format(...args) + "\n");
const sandbox = {
  console: { log, info: log, warn: log, error: log, debug: log },
  require: createRequire(path.join(process.cwd(), "index.js")),
  process,
  Buffer,
  setTimeout,
  setInterval,
  clearTimeout,
  clearInterval,
};
const context = vm.createContext(sandbox);
let number = 0;

function describe(error) {
  // Errors from the context are of another realm: read their fields, not `instanceof`.
  if (error && typeof error === "object" && "message" in error) {
    const head = `${error.name || "Error"}: ${error.message}`;
    const frames = String(error.stack || "")
      .split("\n")
      .filter((line) => /^\s+at .*cell-\d+/.test(line));
    return [head, ...frames].join("\n");
  }
  return String(error);
}

async function run(request) {
  number += 1;
  capture = new Capture(Number(request.budget || 20000), request.spill);
  let value = null;
  let error = null;
  let interrupted = false;
  try {
    let result = vm.runInContext(request.code, context, {
      filename: `cell-${number}`,
      // A little before the host interrupts, so the driver answers first.
      timeout: Math.max(1, Number(request.timeout_ms || 60000) - 250),
      breakOnSigint: true,
    });
    if (result && typeof result.then === "function") result = await result;
    if (result !== undefined) value = util.inspect(result, { depth: 4, maxArrayLength: 200, maxStringLength: 20000 });
  } catch (e) {
    error = describe(e);
    interrupted = /Script execution (timed out|was interrupted)/.test(String(e && e.message));
  }
  const captured = capture.result();
  capture = null;
  return { ...captured, value, error, interrupted };
}

const lines = readline.createInterface({ input: process.stdin });
const queue = [];
let busy = false;
async function drain() {
  if (busy) return;
  busy = true;
  while (queue.length) {
    const reply = await run(JSON.parse(queue.shift()));
    out.write("\u001eTH" + JSON.stringify(reply) + "\n");
  }
  busy = false;
}
process.on("SIGINT", () => {});
lines.on("line", (line) => {
  queue.push(line);
  drain();
});
lines.on("close", () => process.exit(0));
out.write('\u001eTH{"ready": true}\n');
