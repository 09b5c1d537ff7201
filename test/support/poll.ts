/**
 * Calls `probe` until it returns a value other than undefined/false, or fails after `timeoutMs`
 * with the last value seen. For conditions that depend on time passing (leases), never a fixed sleep.
 */
export async function pollUntil<T>(
  description: string,
  probe: () => Promise<T | undefined | false>,
  { timeoutMs = 10_000, intervalMs = 20 } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${description}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
