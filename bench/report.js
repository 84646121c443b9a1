'use strict';
// Measuring and printing helpers shared by bench/run.js and bench/gpu.js.

const fs = require('fs');
const os = require('os');

const now = () => Number(process.hrtime.bigint()) / 1e6; // ms

function median(values) {
  const s = [...values].sort((x, y) => x - y);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}

// The load average as the kernel reports it (all three figures and the
// run queue), for the report's record of how quiet the machine was.
function loadavg() {
  try {
    return fs.readFileSync('/proc/loadavg', 'utf8').trim();
  } catch {
    return os.loadavg().map((x) => x.toFixed(2)).join(' ');
  }
}

function fmtMs(ms) {
  if (ms === undefined) return '-';
  if (ms < 1) return ms.toFixed(4);
  if (ms < 10) return ms.toFixed(3);
  if (ms < 1000) return ms.toFixed(2);
  return ms.toFixed(0);
}

const fmt = (x, digits) => (x === undefined ? '-' : x.toFixed(digits));
const fmtErr = (x) => (x === undefined ? '-' : x === Infinity ? 'inf' : x.toExponential(1));
const round = (x, digits = 4) => (typeof x === 'number' && Number.isFinite(x) ? Number(x.toPrecision(digits)) : x);

// Prints `lines` (arrays of strings) under `header` in aligned columns:
// the first and last column left-aligned, the others right-aligned.
function printTable(header, lines) {
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i].length)));
  const print = (cells) =>
    console.log(
      cells
        .map((c, i) => (i === 0 || i === cells.length - 1 ? c.padEnd(widths[i]) : c.padStart(widths[i])))
        .join('  ')
        .trimEnd(),
    );
  print(header);
  print(widths.map((w) => '-'.repeat(w)));
  lines.forEach(print);
}

/**
 * Parses a benchmark's command line into a copy of `defaults`. --threads
 * (when `defaults` has threads), --runs and --quick are common;
 * `handlers[arg](value, opts, positiveInt)` handles a script's own flags,
 * where value() takes the next argument and positiveInt() takes it as a
 * positive integer.
 */
function parseArgs(argv, defaults, handlers = {}) {
  const opts = { ...defaults };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${arg} needs a value`);
      return argv[++i];
    };
    const positiveInt = () => {
      const n = Number(value());
      if (!Number.isInteger(n) || n < 1) throw new Error(`${arg}: a positive integer`);
      return n;
    };
    if (Object.prototype.hasOwnProperty.call(handlers, arg)) {
      handlers[arg](value, opts, positiveInt);
    } else if (arg === '--threads' && 'threads' in defaults) {
      opts.threads = value().split(',').map(Number);
      if (!opts.threads.every((n) => Number.isInteger(n) && n > 0)) throw new Error('--threads: positive integers');
    } else if (arg === '--runs') {
      opts.runs = positiveInt();
    } else if (arg === '--quick') {
      opts.quick = true;
    } else {
      throw new Error(`unknown argument ${arg}`);
    }
  }
  return opts;
}

/**
 * onnxruntime-node's session options for every bench comparison: one place,
 * so that each workload measures ORT configured the same way.
 */
function ortSessionOptions(threads) {
  return {
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    graphOptimizationLevel: 'all',
    executionMode: 'sequential',
  };
}

// Peak resident memory of this process. On Linux, getrusage's maxRSS (what
// process.resourceUsage() reports) survives fork and exec, so a child
// started from a big parent reports the parent's peak if it stays smaller;
// VmHWM in /proc/self/status belongs to the child's own address space.
function peakRssMb() {
  try {
    const hwm = /^VmHWM:\s+(\d+) kB/m.exec(require('fs').readFileSync('/proc/self/status', 'utf8'));
    if (hwm) return Number(hwm[1]) / 1024;
  } catch {
    // not Linux: fall through
  }
  return process.resourceUsage().maxRSS / 1024; // kilobytes
}

module.exports = { now, median, loadavg, fmtMs, fmt, fmtErr, round, printTable, parseArgs, ortSessionOptions, peakRssMb };
