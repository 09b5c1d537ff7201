/** Output for people (aligned tables) and for machines (JSON), in one place. */

export type Cell = string | number | null | undefined;

/**
 * An aligned table: a header row, then the rows; empty cells show as "-". `minWidths` keeps columns
 * steady across tables printed one after another (a follow prints a table per new row).
 */
export function table(headers: string[], rows: Cell[][], minWidths: number[] = []): string {
  const text = rows.map((row) => row.map((cell) => (cell === null || cell === undefined || cell === '' ? '-' : String(cell))));
  const widths = headers.map((header, i) => Math.max(minWidths[i] ?? 0, header.length, ...text.map((row) => row[i]?.length ?? 0)));
  const line = (cells: string[]) =>
    cells
      .map((cell, i) => (i === cells.length - 1 ? cell : cell.padEnd(widths[i])))
      .join('  ')
      .trimEnd();
  return [line(headers), ...text.map(line)].join('\n');
}

/** A duration for people: 850ms, 12.3s, 4m05s, 2h10m, 3d04h. */
export function duration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '-';
  const sign = ms < 0 ? '-' : '';
  const abs = Math.abs(ms);
  if (abs < 1000) return `${sign}${Math.round(abs)}ms`;
  if (abs < 60_000) return `${sign}${(abs / 1000).toFixed(1)}s`;
  const s = Math.floor(abs / 1000);
  if (s < 3600) return `${sign}${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  if (s < 86_400) return `${sign}${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
  return `${sign}${Math.floor(s / 86_400)}d${String(Math.floor((s % 86_400) / 3600)).padStart(2, '0')}h`;
}

/**
 * A schedule's count and when its next entry is due, relative to `now` (Redis' clock): `3 (next in
 * 4.0s)`, `3 (next due 1.2s ago)`, or the count alone when nothing waits or no due time is kept.
 */
export function scheduleCell(count: number, nextDueAt: number | null | undefined, now: number): string {
  if (count === 0 || nextDueAt === null || nextDueAt === undefined) return String(count);
  const wait = nextDueAt - now;
  return wait > 0 ? `${count} (next in ${duration(wait)})` : `${count} (next due ${duration(-wait)} ago)`;
}

/** Shard lists as ranges: 0-3,7. */
export function shardList(shards: number[]): string {
  const sorted = [...shards].sort((a, b) => a - b);
  const parts: string[] = [];
  for (let i = 0; i < sorted.length; ) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j] + 1) j++;
    parts.push(j === i ? String(sorted[i]) : `${sorted[i]}-${sorted[j]}`);
    i = j + 1;
  }
  return parts.join(',');
}

/** Where one run of `rsc` writes its results (standard output, or a caller's sink): tables, JSON, raw text. */
export interface Printer {
  /** A line for people. */
  print(text: string): void;
  /** One JSON document for machines. */
  json(value: unknown): void;
  /** One JSON document per line, for streams of results (--watch, --follow). */
  jsonLine(value: unknown): void;
  /** Text as it is (a redraw's escape codes). */
  raw(text: string): void;
}

export function printerTo(write: (text: string) => void): Printer {
  return {
    print: (text) => write(`${text}\n`),
    json: (value) => write(`${JSON.stringify(value, null, 2)}\n`),
    jsonLine: (value) => write(`${JSON.stringify(value)}\n`),
    raw: write,
  };
}
