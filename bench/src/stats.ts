/** Small statistics helpers for benchmark samples. */
export function percentile(samples: readonly number[], p: number): number {
  if (samples.length === 0) return Number.NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank];
}

export const median = (samples: readonly number[]): number => percentile(samples, 50);

export interface Spread {
  median: number;
  min: number;
  max: number;
}

export function spread(samples: readonly number[]): Spread {
  return { median: median(samples), min: Math.min(...samples), max: Math.max(...samples) };
}

/** Milliseconds since `start` (from process.hrtime.bigint()). */
export function elapsedMs(start: bigint): number {
  return Number(process.hrtime.bigint() - start) / 1e6;
}
