import { Logger } from '@nestjs/common';
import { ClientProxy, type ReadPacket, type WritePacket } from '@nestjs/microservices';
import {
  checkOption,
  DEFAULT_KEY_PREFIX,
  type OutgoingMessage,
  ReadDeadlineError,
  StreamProducer,
  type StreamProducerOptions,
} from '@redis-stream-coordinator/core';
import type { Cluster, Redis } from 'ioredis';
import { v7 as uuidv7 } from 'uuid';
import { CoordinatorConnection } from '../coordinator-connection';
import type { CoordinatorModuleOptions } from '../coordinator-module-options';
import { resolvePublisherCodec } from '../stream-publisher';
import { ThrottledLogger } from '../throttled-logger';
import { type AwaitedRequest, checkReply } from './reply-check';
import { type InboxReply, ReplyInbox } from './reply-inbox';
import { CORRELATION_ID_HEADER, inboxKey, REPLY_DEADLINE_HEADER, REPLY_TO_HEADER, requestRef } from './reply-protocol';
import { StreamRecord } from './stream-record';

const DEFAULT_TIMEOUT_MS = 5000;
const DEFAULT_INBOX_TTL_MS = 30_000;
/** How long one XREAD of the inbox blocks: also how late close() notices at worst. */
const INBOX_BLOCK_MS = 1000;
/**
 * How much later than its block time an inbox read may come back before its connection counts as
 * stuck and is reset (SPEC 10.1): a half-open connection never answers, and the client would wait
 * for good while every request times out. The member's rule for its reads (`max(2 s, blockMs)`,
 * without a session to scale by): a busy Redis or a GC pause does not reset a healthy connection.
 */
const INBOX_READ_GRACE_MS = Math.max(2000, INBOX_BLOCK_MS);
const INBOX_RETRY_DELAY_MS = 500;
/**
 * How long close() waits for its inbox's DEL (SPEC 10.1: close() returns whatever Redis does). A
 * connection that stops answering would hold it for good; an inbox not deleted expires by its TTL.
 */
const INBOX_DELETE_TIMEOUT_MS = 2000;

/** Options of `new CoordinatorClientProxy(options)`. */
export interface CoordinatorClientProxyOptions {
  /** The Redis connection: as `CoordinatorModule.forRoot`'s (`url`/`options`, connected and closed by the client, or an existing `client`, left open). */
  redis: CoordinatorModuleOptions['redis'];
  /** Key prefix of the coordinator keys (the servers' `coordinator.keyPrefix`). Default `rsc`. */
  keyPrefix?: string;
  /**
   * The routing key of an entry, from its pattern and data, when the data is not a StreamRecord:
   * all entries of one key go to one shard, in order. Default: none (entries are spread round-robin).
   *
   * @example key: (data) => (data as Order).customerId
   */
  key?: (data: unknown, pattern: string) => string | undefined;
  /** How long `send()` waits for the reply before it fails with RequestTimeoutError. Default 5000 ms. */
  timeoutMs?: number;
  /**
   * Time to live of this client's reply inbox, refreshed every third of it while the client runs:
   * the inbox of a client that died without `close()` is deleted by Redis this long after. Default 30000 ms.
   */
  inboxTtlMs?: number;
  /** Producer options of every stream written (`shardCount`, `maxLenApprox`, `codec`…). */
  producer?: Omit<StreamProducerOptions, 'streamPrefix' | 'keyPrefix'>;
}

/** Options of a client on a CoordinatorModule connection: the connection gives `redis` and `keyPrefix`. */
export type CoordinatorClientConnectionOptions = Omit<CoordinatorClientProxyOptions, 'redis' | 'keyPrefix'>;

/** What `send()` fails with when no reply came within `timeoutMs`. */
export class RequestTimeoutError extends Error {
  override readonly name = 'RequestTimeoutError';
  constructor(
    readonly pattern: string,
    readonly timeoutMs: number,
  ) {
    super(`no reply to a request on ${JSON.stringify(pattern)} within ${timeoutMs} ms`);
  }
}

interface PendingRequest extends AwaitedRequest {
  callback: (packet: WritePacket) => void;
  timer: NodeJS.Timeout;
}

/**
 * A Nest `ClientProxy` on coordinated Redis Streams. `emit(prefix, data)` appends an entry to the
 * stream `prefix` through StreamProducer (keyed by a StreamRecord's key or the `key` option), so
 * a `@EventPattern(prefix)` of RedisStreamsServer, a `@StreamListener` or any member of a group on
 * that stream handles it. `send(prefix, data)` appends the entry as a request naming this client's
 * reply inbox and a correlation id; the observable emits the handler's values and completes, fails
 * with the handler's error, or with RequestTimeoutError after `timeoutMs`.
 *
 * @example
 * { provide: 'ORDERS', useFactory: () => new CoordinatorClientProxy({ redis: { url }, key: (order) => (order as Order).customerId }) }
 *
 * constructor(@Inject('ORDERS') private readonly orders: CoordinatorClientProxy) {}
 * await lastValueFrom(this.orders.emit('orders', order));
 * const price = await lastValueFrom(this.orders.send('prices', { sku: 'A-1' }));
 */
export class CoordinatorClientProxy extends ClientProxy {
  private readonly log = new Logger('CoordinatorClientProxy');
  private readonly throttled = new ThrottledLogger(this.log);
  private readonly keyPrefix: string;
  private readonly timeoutMs: number;
  private readonly inboxTtlMs: number;
  private readonly clientId = uuidv7();
  private connection: CoordinatorConnection | undefined;
  private readonly producers = new Map<string, StreamProducer>();
  private readonly pending = new Map<string, PendingRequest>();
  /** The inbox, created by the first send(): a client that only emits never has one. */
  private inbox: Promise<ReplyInbox> | undefined;
  private reader: Redis | Cluster | undefined;
  private refreshTimer: NodeJS.Timeout | undefined;
  private closed = false;
  private readonly counters = { lateReplies: 0, timedOut: 0, inboxRecreated: 0, refusedReplies: 0, inboxReadTimeouts: 0 };
  /** Inbox reads lost in a row (their connection reset): a warning while it lasts, a line when it ends. */
  private lostReadsInARow = 0;

  constructor(private readonly options: CoordinatorClientProxyOptions) {
    super();
    if (options === null || typeof options !== 'object') throw new TypeError('CoordinatorClientProxy(options): options must be an object');
    const redis = options.redis as unknown;
    if (
      !redis ||
      typeof redis !== 'object' ||
      (!options.redis.url && !options.redis.options && !options.redis.client && !options.redis.cluster)
    ) {
      throw new Error(
        'CoordinatorClientProxy: the "redis" option is required: give redis.url, redis.options, redis.cluster or redis.client',
      );
    }
    if (options.key !== undefined && typeof options.key !== 'function') {
      throw new TypeError(
        `CoordinatorClientProxy: key must be a function (data, pattern) => string | undefined, got ${typeof options.key}`,
      );
    }
    this.timeoutMs = checkOption('nestjs.client.timeoutMs', options.timeoutMs ?? DEFAULT_TIMEOUT_MS, {
      label: 'CoordinatorClientProxy: timeoutMs',
    });
    this.inboxTtlMs = checkOption('nestjs.client.inboxTtlMs', options.inboxTtlMs ?? DEFAULT_INBOX_TTL_MS, {
      label: 'CoordinatorClientProxy: inboxTtlMs',
    });
    this.keyPrefix = options.keyPrefix ?? DEFAULT_KEY_PREFIX;
    // Nest 10/11 need these for the base class; the payload is the entry's payload, not a packet.
    this.initializeSerializer({});
    this.initializeDeserializer({});
  }

  /**
   * A client on a `CoordinatorModule.forRoot` connection (what `CoordinatorClientsModule` provides):
   * the module's Redis and `coordinator.keyPrefix`, and for the streams it writes the module's
   * `defaults.shardCount` and `publisher.codec` unless `producer` names its own. The module closes the
   * connection after the client (which deletes its inbox first).
   */
  static fromConnection(connection: CoordinatorConnection, options: CoordinatorClientConnectionOptions = {}): CoordinatorClientProxy {
    const client = new CoordinatorClientProxy({
      ...options,
      redis: { client: connection.client },
      keyPrefix: connection.options.coordinator?.keyPrefix,
      producer: {
        shardCount: connection.options.defaults?.shardCount,
        codec: resolvePublisherCodec(connection.options.publisher?.codec, 'CoordinatorModule: publisher.codec'),
        ...options.producer,
      },
    });
    connection.closeFirst(() => client.close());
    return client;
  }

  /** Connects to Redis (once; emit() and send() call it). */
  async connect(): Promise<Redis | Cluster> {
    if (this.closed) throw new Error('CoordinatorClientProxy: closed');
    this.connection ??= CoordinatorConnection.fromOptions(
      { redis: this.options.redis },
      (error) => this.throttled.warn('redis', `Redis: ${error.message}`),
      'client',
    );
    return this.connection.client;
  }

  /** Fails what still waits for a reply, deletes the inbox, closes the connections the client opened. */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.refreshTimer);
    for (const [id, request] of this.pending) {
      clearTimeout(request.timer);
      request.callback({ err: new Error('CoordinatorClientProxy: closed before the reply came'), isDisposed: true });
      this.pending.delete(id);
    }
    const inbox = await this.inbox?.catch(() => undefined);
    this.inbox = undefined;
    if (inbox && this.connection?.client.status === 'ready') await deleteWithin(inbox, INBOX_DELETE_TIMEOUT_MS, this.log);
    this.reader?.disconnect();
    this.reader = undefined;
    await this.connection?.close();
    this.connection = undefined;
  }

  /** Closes the client with its application when Nest created it as a provider (`useFactory`). */
  onApplicationShutdown(): Promise<void> {
    return this.close();
  }

  /** The Redis client (after connect()). */
  unwrap<T = Redis>(): T {
    if (!this.connection) throw new Error('CoordinatorClientProxy: not connected: call connect() (or emit/send) first');
    return this.connection.client as T;
  }

  /** The key of this client's reply inbox (it exists from the first send() to close()). */
  get inboxKey(): string {
    return inboxKey(this.keyPrefix, this.clientId);
  }

  /**
   * Requests waiting for a reply, and what the client counted: `refusedReplies` are replies naming a
   * waiting request but answering another entry than the one this client wrote (a forgery);
   * `inboxReadTimeouts` are inbox reads that did not come back in time, whose connection was reset.
   */
  stats(): {
    pendingRequests: number;
    lateReplies: number;
    timedOut: number;
    inboxRecreated: number;
    refusedReplies: number;
    inboxReadTimeouts: number;
  } {
    return { pendingRequests: this.pending.size, ...this.counters };
  }

  protected async dispatchEvent<T = unknown>(packet: ReadPacket): Promise<T> {
    const pattern = this.patternOf(packet.pattern);
    return (await this.producer(pattern).send(this.outgoing(pattern, packet.data))) as T;
  }

  protected publish(partialPacket: ReadPacket, callback: (packet: WritePacket) => void): () => void {
    const id = uuidv7();
    let pattern: string;
    try {
      pattern = this.patternOf(partialPacket.pattern);
    } catch (error) {
      callback({ err: error, isDisposed: true });
      return () => undefined;
    }
    const timer = setTimeout(() => {
      if (!this.pending.delete(id)) return;
      this.counters.timedOut += 1;
      callback({ err: new RequestTimeoutError(pattern, this.timeoutMs), isDisposed: true });
    }, this.timeoutMs);
    this.pending.set(id, { callback, timer, early: [] });
    void (async () => {
      const inbox = await this.ensureInbox();
      const message = this.outgoing(pattern, partialPacket.data);
      if (message.delayMs !== undefined || message.deliverAt !== undefined) {
        throw new TypeError(
          `CoordinatorClientProxy.send to "${pattern}": a request cannot be delayed (its reply waits timeoutMs at most); emit it, with delayMs or deliverAt in its StreamRecord`,
        );
      }
      message.headers = {
        ...message.headers,
        [REPLY_TO_HEADER]: inbox.key,
        [CORRELATION_ID_HEADER]: id,
        [REPLY_DEADLINE_HEADER]: String(Date.now() + this.timeoutMs),
      };
      const written = await this.producer(pattern).send(message);
      this.sent(id, requestRef(pattern, written.shardIndex, written.id));
    })().catch((error: Error) => {
      // Not sent (no Redis, no stream): the request fails now rather than at its timeout.
      const request = this.pending.get(id);
      if (!request) return;
      this.pending.delete(id);
      clearTimeout(request.timer);
      callback({ err: error, isDisposed: true });
    });
    // Unsubscribing (a caller's own timeout, takeUntil) forgets the request; a late reply is dropped.
    return () => {
      const request = this.pending.get(id);
      if (request) clearTimeout(request.timer);
      this.pending.delete(id);
    };
  }

  private patternOf(pattern: unknown): string {
    if (typeof pattern !== 'string' || pattern === '') {
      throw new TypeError(
        `CoordinatorClientProxy: the pattern must be a stream prefix (a non-empty string), got ${JSON.stringify(pattern)}`,
      );
    }
    return pattern;
  }

  private outgoing(pattern: string, data: unknown): OutgoingMessage {
    if (data instanceof StreamRecord) {
      return {
        payload: data.payload,
        key: data.options.key ?? this.options.key?.(data.payload, pattern),
        headers: { ...data.options.headers },
        shardIndex: data.options.shardIndex,
        // Delayed delivery (an emit only: a request's reply could not wait that long).
        ...(data.options.delayMs === undefined ? {} : { delayMs: data.options.delayMs }),
        ...(data.options.deliverAt === undefined ? {} : { deliverAt: data.options.deliverAt }),
      };
    }
    return { payload: data, key: this.options.key?.(data, pattern) };
  }

  private producer(streamPrefix: string): StreamProducer {
    let producer = this.producers.get(streamPrefix);
    if (!producer) {
      producer = new StreamProducer(this.connection!.client, { ...this.options.producer, streamPrefix, keyPrefix: this.keyPrefix });
      this.producers.set(streamPrefix, producer);
    }
    return producer;
  }

  /** The inbox, created (with its TTL, its refresh and its reader) by the first request. */
  private ensureInbox(): Promise<ReplyInbox> {
    this.inbox ??= (async () => {
      const redis = await this.connect();
      // Without arguments Redis.duplicate() and Cluster.duplicate() do the same: a connection like this one.
      this.reader = (redis as Redis).duplicate();
      this.reader.on('error', () => undefined); // reported through the read loop
      const inbox = new ReplyInbox(redis, this.reader, this.inboxKey, this.inboxTtlMs);
      await inbox.create();
      this.refreshTimer = setInterval(() => void this.refresh(inbox), Math.floor(this.inboxTtlMs / 3));
      this.refreshTimer.unref();
      void this.readReplies(inbox);
      return inbox;
    })();
    // A failed creation (Redis down) is tried again by the next send().
    this.inbox.catch(() => {
      this.inbox = undefined;
    });
    return this.inbox;
  }

  private async refresh(inbox: ReplyInbox): Promise<void> {
    try {
      if (await inbox.refresh()) return;
      // Gone (the client was stalled past its TTL, or Redis lost its keys): replies written
      // meanwhile were dropped by the server, so those requests time out; new ones need the inbox.
      this.counters.inboxRecreated += 1;
      this.log.warn(`reply inbox ${inbox.key} had expired: created again; requests waiting since may time out`);
      await inbox.create();
    } catch (error) {
      this.throttled.warn('refresh', `reply inbox ${inbox.key} could not be refreshed: ${(error as Error).message}`);
    }
  }

  private async readReplies(inbox: ReplyInbox): Promise<void> {
    while (!this.closed) {
      try {
        const replies = await inbox.read(INBOX_BLOCK_MS, INBOX_BLOCK_MS + INBOX_READ_GRACE_MS);
        if (this.lostReadsInARow > 0) {
          this.log.log(`reply inbox ${inbox.key} is read again, after ${this.lostReadsInARow} read(s) lost`);
          this.lostReadsInARow = 0;
        }
        for (const reply of replies) this.deliver(reply);
        if (replies.length > 0) await inbox.trimRead();
      } catch (error) {
        if (this.closed) return;
        if (error instanceof ReadDeadlineError) {
          this.counters.inboxReadTimeouts += 1;
          this.lostReadsInARow += 1;
        }
        this.throttled.warn('read', `reply inbox ${inbox.key} could not be read: ${(error as Error).message}; retrying`);
        await new Promise((resolve) => setTimeout(resolve, INBOX_RETRY_DELAY_MS));
      }
    }
  }

  /** The request's entry is written: replies that came before it are checked now. */
  private sent(id: string, ref: string): void {
    const request = this.pending.get(id);
    if (!request) return;
    request.sent = ref;
    for (const reply of request.early.splice(0)) this.deliver(reply);
  }

  /** A reply is accepted only for a request this client sent and is waiting for, from the entry it wrote (SPEC 10.4). */
  private deliver(reply: InboxReply): void {
    const request = this.pending.get(reply.correlationId);
    if (!request) {
      this.counters.lateReplies += 1; // its request timed out or was unsubscribed
      return;
    }
    const verdict = checkReply(request, reply);
    if ('hold' in verdict) {
      request.early.push(reply);
      return;
    }
    if ('refuse' in verdict) {
      this.refused(reply, verdict.refuse);
      return;
    }
    this.pending.delete(reply.correlationId);
    clearTimeout(request.timer);
    const { body } = reply;
    if (!body || typeof body !== 'object') {
      request.callback({ err: new Error('CoordinatorClientProxy: unreadable reply'), isDisposed: true });
    } else if ('err' in body) {
      request.callback({ err: (body as { err: unknown }).err, isDisposed: true });
    } else {
      const responses = (body as { responses?: unknown[] }).responses ?? [];
      for (const response of responses) request.callback({ response, isDisposed: false });
      request.callback({ isDisposed: true });
    }
  }

  /** A reply to a waiting request that did not come from its entry: dropped, counted, logged; the request still waits. */
  private refused(reply: InboxReply, why: string): void {
    this.counters.refusedReplies += 1;
    this.throttled.warn(
      'refused',
      `a reply to request ${reply.correlationId} was refused (${why}): not from the request this client wrote`,
    );
  }
}

/** Deletes the inbox, or gives up after `timeoutMs` saying so: its TTL removes it then. */
async function deleteWithin(inbox: ReplyInbox, timeoutMs: number, log: Logger): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const gaveUp = new Promise<'late'>((resolve) => {
    timer = setTimeout(() => resolve('late'), timeoutMs);
  });
  const deleted = inbox.delete().then(
    () => 'deleted' as const,
    () => 'failed' as const,
  );
  const outcome = await Promise.race([deleted, gaveUp]);
  clearTimeout(timer);
  if (outcome !== 'deleted') {
    log.warn(
      `reply inbox ${inbox.key} was not deleted at close (${outcome === 'late' ? `no answer within ${timeoutMs} ms` : 'DEL failed'}): it expires by its TTL`,
    );
  }
}
