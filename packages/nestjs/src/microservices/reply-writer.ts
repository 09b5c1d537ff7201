import type { Cluster, Redis } from 'ioredis';
import { INBOX_MAX_LENGTH, REPLY_FIELD } from './reply-protocol';

/**
 * Appends a reply to a requester's inbox. `NOMKSTREAM`: an inbox that no longer exists (its client
 * closed, or stopped refreshing it and it expired) is not created again by a late reply, so an
 * abandoned inbox never comes back as an orphan key. Resolves false when the inbox was gone.
 * Rejects when Redis does not take the write (the caller retries the request). `body` is a
 * ReplyBody as JSON; `request` the requestRef of the entry answered. The caller has checked `inbox`
 * (replyAddressRefusal): this command trims the key it names.
 */
export async function writeReply(
  redis: Redis | Cluster,
  inbox: string,
  correlationId: string,
  request: string,
  body: string,
): Promise<boolean> {
  const id = await redis.xadd(
    inbox,
    'NOMKSTREAM',
    'MAXLEN',
    '~',
    INBOX_MAX_LENGTH,
    '*',
    REPLY_FIELD.correlationId,
    correlationId,
    REPLY_FIELD.request,
    request,
    REPLY_FIELD.body,
    body,
  );
  return id !== null;
}
