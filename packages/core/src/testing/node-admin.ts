import { Redis } from 'ioredis';

/**
 * Runs `call` on a short-lived plain connection to one local node (no cluster routing, no retries:
 * a node that is down fails at once) and closes it, for the launchers' administration.
 */
export async function onNode<R>(port: number, call: (client: Redis) => Promise<R>): Promise<R> {
  const client = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: 1, retryStrategy: () => null });
  client.on('error', () => undefined);
  try {
    return await call(client);
  } finally {
    client.disconnect();
  }
}

/** `call` on the first of `ports` that answers; the last error when none does. */
export async function onAnyNode<R>(ports: number[], call: (client: Redis) => Promise<R>): Promise<R> {
  let lastError: unknown = new Error('no node is running');
  for (const port of ports) {
    try {
      return await onNode(port, call);
    } catch (error) {
      lastError = error;
    }
  }
  throw lastError;
}

/** Checks every 100 ms until `check` is true; past `deadlineMs`, fails saying what it waited for (and the last error). */
export async function waitUntil(check: () => Promise<boolean>, what: string, deadlineMs = 30_000): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  let lastError: unknown;
  for (;;) {
    try {
      if (await check()) return;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() > deadline)
      throw new Error(`timed out after ${deadlineMs} ms waiting for ${what}${lastError ? `: ${(lastError as Error).message}` : ''}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
