// lines.js: line-by-line file reading and writing in the task directory over wasi:filesystem,
// for ctxhost plugin components in JavaScript (componentize-js has no `fs` module).
//
// The host preopens the task directory as "."; every path here is relative to it (`..` and
// absolute paths cannot leave it). Errors are thrown as ctxhost `plugin-error`s
// (`{ payload: { tag: 'io', val: 'reading current.jsonl: no-entry' } }`), which componentize-js
// returns as the `err` of a `result`.

import { getDirectories } from 'wasi:filesystem/preopens@0.2.12';

const CHUNK = 64 * 1024;
const encoder = new TextEncoder();

/** The task directory (the preopen named "."). */
function taskDir() {
  const found = getDirectories().find(([, name]) => name === '.');
  if (!found) {
    throw ioError('opening the task directory', 'no preopened directory "."');
  }
  return found[0];
}

/** A `plugin-error` to throw: `io` naming what was done and the WASI error code. */
export function ioError(what, e) {
  return { payload: { tag: 'io', val: `${what}: ${e && e.payload !== undefined ? e.payload : e}` } };
}

/** A `plugin-error` to throw: `invalid-input` naming the file and line. */
export function invalidInput(text) {
  return { payload: { tag: 'invalid-input', val: text } };
}

function open(path, openFlags, flags, what) {
  try {
    return taskDir().openAt({}, path, openFlags, flags);
  } catch (e) {
    throw ioError(`${what} ${path}`, e);
  }
}

/**
 * The lines of a text file, one at a time (without the `\n`; a last line without one is
 * yielded too). Reads 64 KiB at a time, so a large file never sits in memory whole.
 */
export function* readLines(path) {
  const file = open(path, {}, { read: true }, 'reading');
  const decoder = new TextDecoder('utf-8', { fatal: true });
  let offset = 0n;
  let pending = '';
  for (;;) {
    let chunk, end;
    try {
      [chunk, end] = file.read(BigInt(CHUNK), offset);
    } catch (e) {
      throw ioError(`reading ${path}`, e);
    }
    offset += BigInt(chunk.length);
    try {
      pending += decoder.decode(chunk, { stream: !end && chunk.length > 0 });
    } catch (e) {
      throw invalidInput(`${path}: not UTF-8 (near byte ${offset})`);
    }
    let newline;
    while ((newline = pending.indexOf('\n')) >= 0) {
      yield pending.slice(0, newline);
      pending = pending.slice(newline + 1);
    }
    if (end || chunk.length === 0) {
      break;
    }
  }
  if (pending.length > 0) {
    yield pending;
  }
}

/**
 * Each non-blank line of a JSONL file parsed: `{ number, raw, value }` (number from 1).
 * A line that is not JSON is an `invalid-input` error naming the file and line.
 */
export function* readJsonLines(path) {
  let number = 0;
  for (const raw of readLines(path)) {
    number += 1;
    if (raw.trim() === '') {
      continue;
    }
    let value;
    try {
      value = JSON.parse(raw);
    } catch (e) {
      throw invalidInput(`${path} line ${number}: ${e.message}`);
    }
    yield { number, raw, value };
  }
}

/** `value` as one JSONL line (with U+2028/U+2029 escaped, as ctxhost's writers do). */
export function jsonLine(value) {
  return JSON.stringify(value).replace(/\u2028/g, '\\u2028').replace(/\u2029/g, '\\u2029');
}

/**
 * Writes a file a line at a time: `new LineWriter(path)` creates or empties it,
 * `new LineWriter(path, { append: true })` appends to it. Lines are buffered and written
 * 64 KiB per WASI call; call `close()` to write the rest.
 */
export class LineWriter {
  constructor(path, { append = false } = {}) {
    this.path = path;
    const flags = append ? { create: true } : { create: true, truncate: true };
    this.file = open(path, flags, { write: true }, 'writing');
    this.offset = 0n;
    if (append) {
      try {
        this.offset = this.file.stat().size;
      } catch (e) {
        throw ioError(`reading the size of ${path}`, e);
      }
    }
    this.buffer = [];
    this.buffered = 0;
  }

  /** Append `text` and a `\n`. */
  writeLine(text) {
    this.buffer.push(text, '\n');
    this.buffered += text.length + 1;
    if (this.buffered >= CHUNK) {
      this.flush();
    }
  }

  /** Write what is buffered. */
  flush() {
    if (this.buffer.length === 0) {
      return;
    }
    let bytes = encoder.encode(this.buffer.join(''));
    this.buffer = [];
    this.buffered = 0;
    while (bytes.length > 0) {
      let written;
      try {
        written = this.file.write(bytes, this.offset);
      } catch (e) {
        throw ioError(`writing ${this.path}`, e);
      }
      this.offset += written;
      bytes = bytes.subarray(Number(written));
    }
  }

  /** Write what is buffered; the file is complete. */
  close() {
    this.flush();
  }
}

/** Whether `path` exists in the task directory. */
export function exists(path) {
  try {
    taskDir().statAt({}, path);
    return true;
  } catch (e) {
    if (e && e.payload === 'no-entry') {
      return false;
    }
    throw ioError(`looking up ${path}`, e);
  }
}

/** Delete `path` if it exists. */
export function remove(path) {
  try {
    taskDir().unlinkFileAt(path);
  } catch (e) {
    if (!(e && e.payload === 'no-entry')) {
      throw ioError(`deleting ${path}`, e);
    }
  }
}
