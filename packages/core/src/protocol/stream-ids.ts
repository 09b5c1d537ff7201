// Redis stream ids ("<ms>-<seq>", both unsigned 64-bit decimals without leading zeros).

/** Compares two decimal strings without leading zeros as numbers, exactly (no 2^53 limit). */
function compareDecimal(a: string, b: string): number {
  if (a.length !== b.length) return a.length < b.length ? -1 : 1;
  return a === b ? 0 : a < b ? -1 : 1;
}

/** Compares two stream ids as Redis orders them: milliseconds, then sequence. "5" means "5-0". */
export function compareStreamIds(a: string, b: string): number {
  const dashA = a.indexOf('-');
  const dashB = b.indexOf('-');
  const byMs = compareDecimal(dashA < 0 ? a : a.slice(0, dashA), dashB < 0 ? b : b.slice(0, dashB));
  if (byMs !== 0) return byMs;
  return compareDecimal(dashA < 0 ? '0' : a.slice(dashA + 1), dashB < 0 ? '0' : b.slice(dashB + 1));
}

/** The smallest stream id after `id` ("ms-seq" -> "ms-(seq+1)"). */
export function nextStreamId(id: string): string {
  const dash = id.indexOf('-');
  if (dash < 0) return `${id}-1`;
  return `${id.slice(0, dash)}-${(BigInt(id.slice(dash + 1)) + 1n).toString()}`;
}
