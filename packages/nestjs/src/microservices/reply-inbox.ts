import type { Cluster, Redis } from 'ioredis';
import { compareStreamIds, nextStreamId, withReadDeadline } from '@redis-stream-coordinator/core';
import { REPLY_FIELD, type ReplyBody } from './reply-protocol';

export interface InboxReply {
  correlationId: string;
  /** The requestRef of the entry answered ('' from a server that did not say). */
  request: string;
  body: ReplyBody | undefined;
}

/**
 * One client's reply inbox: a plain stream that only this client reads (XREAD, no group), kept
 * alive by a TTL the client refreshes. A client that dies stops refreshing, and the inbox expires
 * by itself `ttlMs` later; `delete()` removes it at once on a clean close.
 */
export class ReplyInbox {
  /** The id after which replies are read: the inbox's creation marker at first. */
  private lastId = '0-0';

  constructor(
    /** Commands (create, refresh, trim, delete). */
    private readonly redis: Redis | Cluster,
    /** A connection of its own for the blocking XREAD. */
    private readonly reader: Redis | Cluster,
    readonly key: string,
    readonly ttlMs: number,
  ) {}

  /**
   * Creates the stream (with a marker entry: a stream cannot exist empty without a group) and its
   * TTL in one MULTI, so an inbox never exists without a TTL. Replies before the marker are not ours.
   */
  async create(): Promise<void> {
    const results = await this.redis.multi().xadd(this.key, '*', REPLY_FIELD.correlationId, '').pexpire(this.key, this.ttlMs).exec();
    const [xaddError, markerId] = results?.[0] ?? [new Error('MULTI was discarded')];
    if (xaddError) throw xaddError;
    if (compareStreamIds(String(markerId), this.lastId) > 0) this.lastId = String(markerId);
  }

  /** Extends the TTL; false when the inbox no longer exists (it expired, or Redis lost it). */
  async refresh(): Promise<boolean> {
    return (await this.redis.pexpire(this.key, this.ttlMs)) === 1;
  }

  /**
   * Waits up to `blockMs` for replies after the last one read. A read not back within `deadlineMs`
   * fails with ReadDeadlineError and its connection is reset (SPEC 10.1: a half-open connection
   * never answers). Whatever that abandoned read returns later is dropped without moving the last
   * id read, so the next read gets those replies again: none is skipped.
   */
  async read(blockMs: number, deadlineMs: number): Promise<InboxReply[]> {
    const result = await withReadDeadline(
      this.reader,
      this.reader.xread('COUNT', 100, 'BLOCK', blockMs, 'STREAMS', this.key, this.lastId),
      deadlineMs,
      `the read of reply inbox ${this.key}`,
      'inbox reader',
    );
    const entries = result?.[0]?.[1] ?? [];
    const replies: InboxReply[] = [];
    for (const [id, fields] of entries) {
      this.lastId = id;
      const reply = parseReply(fields);
      if (reply) replies.push(reply);
    }
    return replies;
  }

  /** Removes what was read (and the marker): the inbox holds only replies not yet read. */
  async trimRead(): Promise<void> {
    if (this.lastId === '0-0') return;
    await this.redis.xtrim(this.key, 'MINID', nextStreamId(this.lastId));
  }

  async delete(): Promise<void> {
    await this.redis.del(this.key);
  }
}

function parseReply(fields: string[]): InboxReply | undefined {
  let correlationId = '';
  let request = '';
  let raw: string | undefined;
  for (let i = 0; i + 1 < fields.length; i += 2) {
    if (fields[i] === REPLY_FIELD.correlationId) correlationId = fields[i + 1];
    else if (fields[i] === REPLY_FIELD.request) request = fields[i + 1];
    else if (fields[i] === REPLY_FIELD.body) raw = fields[i + 1];
  }
  if (correlationId === '') return undefined; // the creation marker
  let body: ReplyBody | undefined;
  try {
    body = raw === undefined ? undefined : (JSON.parse(raw) as ReplyBody);
  } catch {
    body = undefined;
  }
  return { correlationId, request, body };
}
