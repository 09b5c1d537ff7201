import fs from 'node:fs';
import type { RecordLine } from './checker';

/**
 * The lines a member process appends to its record file from now on, read incrementally. Faults
 * that wait for something a member records poll every few milliseconds; reading the whole file
 * each time (hundreds of megabytes late in a soak) blocked the harness's event loop, which carries
 * every member's TCP proxy, for seconds at a time: every member's heartbeats then timed out.
 */
export class RecordTail {
  private offset: number;
  private rest = Buffer.alloc(0);
  readonly lines: RecordLine[] = [];

  /** From the file's current end (`fromStart`: from its beginning). */
  constructor(
    private readonly file: string,
    fromStart = false,
  ) {
    this.offset = !fromStart && fs.existsSync(file) ? fs.statSync(file).size : 0;
  }

  /** Reads what was appended since the last call; returns every line read so far. */
  read(): RecordLine[] {
    if (!fs.existsSync(this.file)) return this.lines;
    const size = fs.statSync(this.file).size;
    if (size <= this.offset) return this.lines;
    const chunk = Buffer.alloc(size - this.offset);
    const fd = fs.openSync(this.file, 'r');
    try {
      fs.readSync(fd, chunk, 0, chunk.length, this.offset);
    } finally {
      fs.closeSync(fd);
    }
    this.offset = size;
    const text = Buffer.concat([this.rest, chunk]);
    // Only whole lines: a line being written stays for the next read (split on the byte, so a
    // character cut in two is never decoded).
    const end = text.lastIndexOf(0x0a);
    this.rest = end < 0 ? text : text.subarray(end + 1);
    if (end < 0) return this.lines;
    for (const line of text.subarray(0, end).toString('utf8').split('\n')) {
      if (line.trim() === '') continue;
      try {
        this.lines.push(JSON.parse(line) as RecordLine);
      } catch {
        /* a torn line of a killed process */
      }
    }
    return this.lines;
  }
}

/** Whether the member switched to long handlers (SIGUSR1) and started a handler since. */
export function longHandlerStarted(tail: RecordTail): boolean {
  const lines = tail.read();
  const switched = lines.findIndex((l) => l.e === 'long-handlers');
  return switched >= 0 && lines.slice(switched).some((l) => l.e === 'start');
}
