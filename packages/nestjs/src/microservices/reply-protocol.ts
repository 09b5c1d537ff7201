/**
 * How a request names its reply and how the reply is written: the contract between
 * CoordinatorClientProxy (which sends requests and reads its inbox) and RedisStreamsServer (which
 * answers). A request is an ordinary entry of the stream (its payload is the data), so anything
 * that reads the stream sees it; these headers make it a request.
 */

/** Header naming the inbox stream the reply goes to (a key of the same Redis). */
export const REPLY_TO_HEADER = 'rsc-reply-to';
/** Header carrying the request's correlation id, copied into the reply. */
export const CORRELATION_ID_HEADER = 'rsc-correlation-id';
/** Header with the time (epoch ms) after which the requester no longer waits: the server then skips the request. */
export const REPLY_DEADLINE_HEADER = 'rsc-reply-deadline';

/**
 * Fields of a reply entry in an inbox: the correlation id, the body, and the request it answers
 * (`requestRef`), which the client compares with the entry its XADD wrote.
 */
export const REPLY_FIELD = { correlationId: 'c', body: 'r', request: 'q' } as const;

/** A reply's body (JSON in the `r` field): every value the handler's observable emitted, or the error it ended with. */
export type ReplyBody = { responses: unknown[] } | { err: unknown };

/** Most replies an inbox keeps unread (`XADD MAXLEN ~`): a client that stopped reading cannot grow it without bound. */
export const INBOX_MAX_LENGTH = 10_000;

/**
 * The inbox stream of one client. The braces make it one hash slot on a cluster. The name is
 * built here, not by the core's KeyBuilder, because the inbox belongs to the Nest transport only.
 */
export function inboxKey(keyPrefix: string, clientId: string): string {
  return `${keyPrefix}:inbox:{${clientId}}`;
}

/**
 * The request a reply answers: its stream, shard and entry id. Only the entry that the client's own
 * XADD wrote has it, so a request written by anyone else (even one copying the correlation id and
 * the inbox from a request it read) gets a reply the client refuses (SPEC 10.4).
 */
export function requestRef(streamPrefix: string, shardIndex: number, entryId: string): string {
  return JSON.stringify([streamPrefix, shardIndex, entryId]);
}
