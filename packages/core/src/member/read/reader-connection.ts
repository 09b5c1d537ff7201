import type { Redis } from 'ioredis';
import { sleep } from '../abortable-sleep';

const OPEN_STATUSES = new Set(['connecting', 'connect', 'ready']);

/**
 * Opens again a connection that `disconnect()` closed (a member's blocking reader, when the member
 * is started again). ioredis refuses `connect()` until the close has gone through, so a close still
 * under way is waited for (bounded: a socket that never reports its end is connected anyway, and a
 * refused connect leaves the client to its own reconnects, which the read loop reports).
 */
export async function reconnect(client: Redis): Promise<void> {
  if (OPEN_STATUSES.has(client.status)) {
    let ended: (() => void) | undefined;
    await Promise.race([new Promise<void>((resolve) => client.once('end', (ended = resolve))), sleep(1000)]);
    if (ended) client.off('end', ended);
  }
  if (!OPEN_STATUSES.has(client.status)) client.connect().catch(() => undefined);
}
