/** Redis's reply to a write sent to a replica ("READONLY You can't write against a read only replica."). */
const READONLY = /^READONLY\b/;

/** Whether `error` is Redis refusing a write because the server it went to is a replica. */
export function isReadonlyError(error: unknown): boolean {
  return error instanceof Error && READONLY.test(error.message);
}

/**
 * For ioredis' `reconnectOnError`: reconnect when Redis answers READONLY. A connection to a master
 * that became a replica is not closed by Redis 7 (REPLICAOF closes only blocked clients; Sentinel's
 * own reconfiguration also sends CLIENT KILL, but a demotion by an operator, a test harness or a
 * managed service does not), so without this every write on it is refused for as long as the
 * socket lives. A reconnect of a Sentinel client asks the Sentinels for the master again (a client
 * of a host name that follows the primary, e.g. a managed endpoint, resolves it again).
 *
 * Returns 1, not 2: the refused command fails with its READONLY error instead of being sent again.
 * A replica applied no write of it, nor of the commands sent after it on that connection (ioredis
 * sends those again after the reconnect, or fails them as aborted when they belong to a pipeline or
 * a MULTI it had partly answered), so the caller's retry is safe. ioredis' resend (2) would send a
 * write queued inside a MULTI again on its own, outside the transaction whose rest it aborts (the
 * NestJS transport creates its reply inbox with MULTI so that it never exists without its TTL). The
 * member retries what failed: a heartbeat within a second, an acknowledgement with the ack
 * batcher's backoff (each still checked against its deadline or fencing token when it runs), a read
 * on the read loop's next round; a producer's send reports the refused entries as not written
 * (those of the same pipeline that were aborted, as maybe written).
 */
export function reconnectOnReadonly(error: Error): 1 | false {
  return isReadonlyError(error) ? 1 : false;
}
