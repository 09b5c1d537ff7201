/**
 * Calls `probe` until it returns a value other than undefined/false, or fails after `timeoutMs`
 * (with `state()`, when given, in the message: what the wait saw instead). For conditions that
 * depend on time passing (leases), never a fixed sleep.
 */
export async function pollUntil<T>(
  description: string,
  probe: () => Promise<T | undefined | false>,
  { timeoutMs = 10_000, intervalMs = 20, state }: { timeoutMs?: number; intervalMs?: number; state?: () => unknown } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) {
      const seen = state ? `; state: ${JSON.stringify(state())}` : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${description}${seen}`);
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
