import type { RedisClient } from '../scripts';
import { resetConnection } from './connection-reset';

/** A read that did not come back by its deadline; its connection was reset. */
export class ReadDeadlineError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ReadDeadlineError';
  }
}

/**
 * A read has no deadline of its own: on a half-open connection (NAT or firewall state dropped, a
 * failover behind a virtual IP) its request or reply can be stuck for as long as TCP retransmits
 * (minutes), and CLIENT UNBLOCK from another connection cannot reach it. Past the deadline the
 * socket is destroyed (not ended: a FIN may never be answered either), so ioredis reconnects; the
 * read counts as lost. Whatever it delivered, if it ran, is pending under this member untracked,
 * where the gap check and the own-pending sweep find it. `what` names the read in the error.
 */
export async function withReadDeadline<R>(
  reader: RedisClient,
  read: Promise<R>,
  deadlineMs: number,
  what = 'the blocking read',
  connectionName = 'reader',
): Promise<R> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new ReadDeadlineError(`${what} did not come back within ${deadlineMs} ms; ${resetConnection(reader, connectionName)}`)),
      deadlineMs,
    );
  });
  // The abandoned read settles later (a resend after the reconnect, or an error): nobody waits for it.
  read.catch(() => undefined);
  try {
    return await Promise.race([read, deadline]);
  } finally {
    clearTimeout(timer);
  }
}
