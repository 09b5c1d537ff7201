import { EventEmitter } from 'node:events';
import { Logger } from '@nestjs/common';
import { type CustomTransportStrategy, type MessageHandler, Server } from '@nestjs/microservices';
import { CoordinatedMember, DEFAULT_KEY_PREFIX, REPLAY_HEADER, type StreamMessage } from '@redis-stream-coordinator/core';
import type { Redis } from 'ioredis';
import { isObservable, lastValueFrom, toArray } from 'rxjs';
import { DEFAULT_CONNECTION_NAME } from '../coordinator.constants';
import { connectionName } from '../coordinator.tokens';
import { CoordinatorConnection } from '../coordinator-connection';
import type { MemberDefaults } from '../coordinator-module-options';
import { StreamContext } from '../stream-context';
import { ThrottledLogger } from '../throttled-logger';
import { installExceptionWatch, type ThrownByCall, watchExceptions } from './handler-exceptions';
import {
  type RedisStreamsServerConnectionOptions,
  type RedisStreamsServerOptions,
  resolvePatternOptions,
} from './redis-streams-server.options';
import { RedisStreamsContext } from './redis-streams.context';
import { replyAddressRefusal } from './reply-address';
import { CORRELATION_ID_HEADER, REPLY_DEADLINE_HEADER, REPLY_TO_HEADER, type ReplyBody, requestRef } from './reply-protocol';
import { writeReply } from './reply-writer';

/** The transport id of RedisStreamsServer: `@EventPattern('orders', REDIS_STREAMS_TRANSPORT)` binds a handler to it alone. */
export const REDIS_STREAMS_TRANSPORT: unique symbol = Symbol.for('redis-stream-coordinator/microservices');

/**
 * The transport id of the server on a CoordinatorModule connection: REDIS_STREAMS_TRANSPORT for the
 * unnamed one, a symbol of its own for a named one, so that with a server per connection
 * `@EventPattern('audit', getRedisStreamsTransportId('audit'))` runs on the audit connection's alone
 * (a pattern that names no transport runs on every server).
 */
export function getRedisStreamsTransportId(connection?: string): symbol {
  const name = connectionName(connection);
  return name === DEFAULT_CONNECTION_NAME ? REDIS_STREAMS_TRANSPORT : Symbol.for(`redis-stream-coordinator/microservices:${name}`);
}

const DEFAULT_START_RETRY_DELAY_MS = 2000;

/** The members of one pattern (one stream prefix). */
interface PatternGroup {
  streamPrefix: string;
  consumerGroup: string;
  kind: 'event' | 'request';
  members: CoordinatedMember[];
}

/** What `RedisStreamsServer.stats()` reports. */
export interface RedisStreamsServerStats {
  patterns: {
    streamPrefix: string;
    consumerGroup: string;
    kind: 'event' | 'request';
    members: { memberId: string; stats: ReturnType<CoordinatedMember['stats']> }[];
  }[];
  /** Replies not written because the requester's inbox no longer existed (it closed, or it died and its inbox expired). */
  droppedReplies: number;
  /** Requests skipped because their requester had stopped waiting (`rsc-reply-deadline` passed) before a handler was free. */
  expiredRequests: number;
  /** Reply writes Redis refused or did not answer: the request was retried (and dead-lettered after `maxAttempts`). */
  failedReplies: number;
  /**
   * Requests whose `rsc-reply-to` is not an inbox of this transport under its key prefix (or whose
   * correlation id is not one a client makes): answered nowhere, acknowledged, an `error` event each.
   */
  refusedRequests: number;
}

/**
 * A `@nestjs/microservices` transport on coordinated Redis Streams: every `@EventPattern(prefix)`
 * and `@MessagePattern(prefix)` handler becomes `concurrency` members of a consumer group on the
 * stream `prefix`, with sharding, sticky rebalancing, fencing, retries and dead letters underneath.
 * Handlers run through Nest's RPC pipeline (guards, interceptors, pipes, filters, `@Payload()`,
 * `@Ctx()` giving a RedisStreamsContext), as for any transport.
 *
 * What a handler's outcome means for the entry:
 * - `@EventPattern`: resolves (or its observable completes) → acknowledged; throws, or an
 *   exception filter answers with an error (Nest's default RPC filter does) → retried in place,
 *   then dead-lettered (`maxAttempts`).
 * - `@MessagePattern` with a request (an entry carrying `rsc-reply-to`): every value the handler
 *   emits, or the error it ends with, is written to the requester's inbox as one reply, then the
 *   request is acknowledged: an error is an answer, not a retry. A reply Redis does not take is
 *   retried with the request (the handler runs again: at least once). A request whose requester
 *   stopped waiting before a handler was free is acknowledged without running the handler.
 * - `@EventPattern` with a request: handled as an event (never skipped, whatever the deadline),
 *   then an empty reply.
 * - A request whose `rsc-reply-to` is not an inbox of this transport under this key prefix: one
 *   `error` event and `refusedRequests` + 1, answered nowhere, acknowledged (SPEC 10.4); an
 *   `@EventPattern` handler still handles it as an event.
 * - A replayed dead letter (an entry carrying `rsc-replay-of`) is an event, whatever request headers
 *   it copied: its requester gave up long ago, and a reply from the replayed entry is not one the
 *   client accepts (it answers another entry than the one the client wrote). The handler runs;
 *   a failure is retried; nothing is written to the inbox.
 *
 * @example
 * const app = await NestFactory.create(AppModule);
 * app.connectMicroservice({ strategy: new RedisStreamsServer({ redis: { url }, consumerGroup: 'billing' }) });
 * await app.startAllMicroservices();
 *
 * @EventPattern('orders', { concurrency: 2 })
 * onOrder(@Payload() order: Order, @Ctx() context: RedisStreamsContext) {}
 *
 * @MessagePattern('prices')
 * price(@Payload() query: PriceQuery) { return this.prices.quote(query); }
 */
export class RedisStreamsServer extends Server implements CustomTransportStrategy {
  override transportId: symbol = REDIS_STREAMS_TRANSPORT;
  /**
   * Nest 12: this transport awaits an event handler's outcome (it decides the entry's fate), so
   * Nest must not also report the failure itself. Older Nest versions ignore the flag.
   */
  override readonly propagatesEventHandlerErrors = true;
  private readonly log = new Logger('RedisStreamsServer');
  private readonly throttled = new ThrottledLogger(this.log);
  private readonly events = new EventEmitter();
  private connection: CoordinatorConnection | undefined;
  /** A CoordinatorModule connection the server runs on (`fromConnection`): used, never closed, by the server. */
  private moduleConnection: CoordinatorConnection | undefined;
  /** That module's member defaults, under the server's own options. */
  private defaults: MemberDefaults = {};
  private groups: PatternGroup[] = [];
  /** Members whose start failed for good (another live process has the id), by member id: what health reports. */
  private readonly fatalErrors = new Map<string, string>();
  private closing = false;
  /** The key prefix of the coordinator keys, and of the inboxes the server may answer to. */
  private readonly keyPrefix: string;
  private readonly counters = { droppedReplies: 0, expiredRequests: 0, failedReplies: 0, refusedRequests: 0 };

  constructor(private readonly options: RedisStreamsServerOptions) {
    super();
    if (options === null || typeof options !== 'object') {
      throw new TypeError('RedisStreamsServer(options): options must be an object');
    }
    const redis = options.redis as unknown;
    if (
      !redis ||
      typeof redis !== 'object' ||
      (!options.redis.url && !options.redis.options && !options.redis.client && !options.redis.cluster)
    ) {
      throw new Error('RedisStreamsServer: the "redis" option is required: give redis.url, redis.options, redis.cluster or redis.client');
    }
    this.events.on('error', () => undefined); // reported by the logger; listeners of on('error') get it too
    this.keyPrefix = options.coordinator?.keyPrefix ?? DEFAULT_KEY_PREFIX;
  }

  /**
   * A server on a `CoordinatorModule.forRoot` connection (what `RedisStreamsServerModule` provides):
   * its Redis, `coordinator` settings (key prefix…), `startRetryDelayMs` and member `defaults` are the
   * module's, under the server's own options; the module closes the connection, after the server.
   * A named connection's server has its own transport id (`getRedisStreamsTransportId(name)`).
   */
  static fromConnection(connection: CoordinatorConnection, options: RedisStreamsServerConnectionOptions): RedisStreamsServer {
    const server = new RedisStreamsServer({
      ...options,
      redis: { client: connection.client },
      coordinator: connection.options.coordinator,
      startRetryDelayMs: connection.options.startRetryDelayMs,
    });
    server.moduleConnection = connection;
    server.defaults = connection.options.defaults ?? {};
    server.transportId = getRedisStreamsTransportId(connection.name);
    // The module's health indicator reports the server's members with its own.
    connection.reportMembers(() =>
      server.groups.flatMap((group) =>
        group.members.map((member) => ({
          member,
          listenerId: `transport:${group.streamPrefix}`,
          ...(server.fatalErrors.has(member.memberId) ? { fatalError: server.fatalErrors.get(member.memberId) } : {}),
        })),
      ),
    );
    return server;
  }

  /**
   * Creates the members of every pattern and starts them in the background, as CoordinatorModule
   * does: a member Redis does not let join yet (unreachable, a stream without metadata and no
   * `shardCount`) retries (`startRetryDelayMs`) with a warning, and `stats()` shows it not joined;
   * the application's start never hangs on Redis. A misconfigured pattern (no consumer group, a bad
   * option) fails the start with an error naming the pattern.
   */
  async listen(callback: (error?: unknown) => void): Promise<void> {
    try {
      this.closing = false;
      this.connection =
        this.moduleConnection ??
        CoordinatorConnection.fromOptions(
          { redis: this.options.redis, coordinator: this.options.coordinator, startRetryDelayMs: this.options.startRetryDelayMs },
          (error) => this.throttled.warn('redis', `Redis: ${error.message}`),
          'microservices',
        );
      this.groups = [...this.messageHandlers].map(([pattern, handler]) => this.createGroup(pattern, handler));
      if (!installExceptionWatch()) {
        this.log.warn(
          "Nest's RpcExceptionsHandler was not found in @nestjs/microservices: a dead letter's reason is the RPC exception filter's answer, not the handler's exception",
        );
      }
    } catch (error) {
      await this.close();
      callback(error);
      return;
    }
    for (const group of this.groups) {
      for (const member of group.members) void this.startWithRetries(member, group);
    }
    callback();
  }

  /** Stops every member (in-flight handlers finish, acknowledgements land, they leave) and closes the Redis connection the server opened. */
  async close(): Promise<void> {
    this.closing = true;
    const members = this.groups.flatMap((group) => group.members);
    await Promise.all(
      members.map((member) =>
        member.stop().catch((error: Error) => this.log.warn(`member ${member.memberId} did not stop cleanly: ${error.message}`)),
      ),
    );
    for (const member of members) member.removeAllListeners();
    this.groups = [];
    this.fatalErrors.clear();
    if (this.connection !== this.moduleConnection) await this.connection?.close();
    this.connection = undefined;
  }

  /**
   * `on('error', (error: Error) => …)`: a member's error or a reply Redis did not take (each is also
   * logged). The only event; the signature is the base class's, which differs across Nest versions.
   */
  // biome-ignore lint/complexity/noBannedTypes: the base class's own signature (Function), which an override must keep
  on<EventKey extends string = string, EventCallback extends Function = Function>(event: EventKey, callback: EventCallback): void {
    if (event !== 'error') throw new TypeError(`RedisStreamsServer.on(event): the only event is "error", got ${JSON.stringify(event)}`);
    this.events.on(event, callback as unknown as (error: Error) => void);
  }

  /** The Redis client and the members (all patterns'), for what the transport does not cover. */
  unwrap<T = { redis: Redis; members: CoordinatedMember[] }>(): T {
    if (!this.connection) throw new Error('RedisStreamsServer: not listening: call app.startAllMicroservices() (or listen()) first');
    return { redis: this.connection.client, members: this.groups.flatMap((group) => group.members) } as T;
  }

  /** The members of every pattern and what the transport counted; for health checks and dashboards. */
  stats(): RedisStreamsServerStats {
    return {
      patterns: this.groups.map((group) => ({
        streamPrefix: group.streamPrefix,
        consumerGroup: group.consumerGroup,
        kind: group.kind,
        members: group.members.map((member) => ({ memberId: member.memberId, stats: member.stats() })),
      })),
      ...this.counters,
    };
  }

  private createGroup(pattern: string, handler: MessageHandler): PatternGroup {
    const connection = this.connection!;
    const { concurrency, memberOptions } = resolvePatternOptions(pattern, handler.extras, this.options, this.defaults);
    const { memberId, memberName, memberInstanceId, ...rest } = memberOptions;
    const baseId = memberId ?? undefined;
    const members: CoordinatedMember[] = [];
    for (let i = 0; i < concurrency; i++) {
      let member: CoordinatedMember | undefined;
      const options = {
        // The server's own connection is the library's to reset when it hangs (half-open).
        resetStuckConnection: connection.owned,
        ...rest,
        streamPrefix: pattern,
        memberName: `${memberName ?? pattern}-m${i}`,
        ...(baseId !== undefined ? { memberId: `${baseId}-m${i}` } : {}),
        // static membership: each member named after the pattern's memberInstanceId (docs/runtime.md)
        ...(memberInstanceId !== undefined ? { memberId: `${memberInstanceId}-m${i}`, memberInstanceId: `${memberInstanceId}-m${i}` } : {}),
        coordinator: this.options.coordinator,
        handler: (message: StreamMessage) => this.handle(pattern, message, member!),
      };
      try {
        member = new CoordinatedMember(connection.client, options);
      } catch (error) {
        throw new Error(`RedisStreamsServer: pattern ${JSON.stringify(pattern)}: ${(error as Error).message}`, { cause: error });
      }
      const created = member;
      created.on('error', (error) => {
        this.throttled.warn(`${created.memberId}:${error.message}`, `member ${created.memberId} (${pattern}): ${error.message}`);
        this.events.emit('error', error);
      });
      created.on('lease-lost', () =>
        this.log.warn(`member ${created.memberId} (${pattern}) lost its lease: no heartbeat got through; it rejoins when Redis answers`),
      );
      members.push(created);
    }
    return {
      streamPrefix: pattern,
      consumerGroup: memberOptions.consumerGroup,
      kind: handler.isEventHandler ? 'event' : 'request',
      members,
    };
  }

  /** Starts a member, retrying while Redis cannot be reached, until it joined or the server closes. */
  private async startWithRetries(member: CoordinatedMember, group: PatternGroup): Promise<void> {
    const delayMs = this.options.startRetryDelayMs ?? DEFAULT_START_RETRY_DELAY_MS;
    while (!this.closing && !member.isRunning()) {
      try {
        await member.start();
        this.log.log(`member ${member.memberId} joined ${group.streamPrefix}/${group.consumerGroup}`);
      } catch (error) {
        if (this.closing) return;
        const fatal = (error as Error).name === 'FencedInstanceIdError'; // another live process has this id: no retry cures it
        this.throttled.warn(
          `start:${member.memberId}`,
          `member ${member.memberId} (${group.streamPrefix}) cannot start${fatal ? '' : ' yet'}: ${(error as Error).message}${fatal ? '' : `; retrying every ${delayMs} ms`}`,
        );
        this.events.emit('error', error);
        if (fatal) {
          this.fatalErrors.set(member.memberId, `gave up starting: ${(error as Error).message}`);
          return;
        }
        await new Promise((resolve) => setTimeout(resolve, delayMs));
      }
    }
  }

  /** Runs one entry through the Nest handler of its pattern; what it resolves or throws decides the entry (see the class). */
  private async handle(pattern: string, message: StreamMessage, member: CoordinatedMember): Promise<void> {
    const handler = this.getHandlerByPattern(pattern);
    if (!handler) throw new Error(`RedisStreamsServer: no handler for pattern ${JSON.stringify(pattern)}`);
    const context = new RedisStreamsContext([
      new StreamContext(message, {
        memberId: member.memberId,
        consumerGroup: member.options.consumerGroup,
        memberEpoch: member.currentMemberEpoch(),
      }),
    ]);
    const thrown = watchExceptions(context);
    const replyTo = message.headers[REPLY_TO_HEADER];
    const correlationId = message.headers[CORRELATION_ID_HEADER];
    // A replay copies the request's headers, its past rsc-reply-deadline too: as a request it would
    // be skipped as expired and acknowledged, never handled. Nobody waits for its answer: an event.
    const replayed = message.headers[REPLAY_HEADER.of] !== undefined;
    if (replayed || (replyTo === undefined && correlationId === undefined)) {
      // An event: nothing to answer, so its outcome is the entry's.
      await settle(pattern, await handler(message.payload, context), thrown);
      return;
    }
    const refusal = replyAddressRefusal(this.keyPrefix, replyTo, correlationId);
    if (refusal !== undefined) {
      this.refuse(pattern, message, refusal, handler.isEventHandler === true);
      // An event handler needs no answer: the entry is still its event. A request handler does not
      // run for a request whose answer could go nowhere; either way the entry is settled, not retried.
      if (handler.isEventHandler) await settle(pattern, await handler(message.payload, context), thrown);
      return;
    }
    const address = { inbox: replyTo!, correlationId: correlationId!, request: requestRef(pattern, message.shardIndex, message.id) };
    let body: ReplyBody;
    if (handler.isEventHandler) {
      // An @EventPattern handler has no answer: it handles the entry as an event whatever the
      // requester's deadline (an event is never skipped), a failure is retried, and the requester
      // learns that it was handled (send() completes without a value) if it still waits.
      await settle(pattern, await handler(message.payload, context), thrown);
      body = { responses: [] };
    } else {
      const deadline = Number(message.headers[REPLY_DEADLINE_HEADER]);
      if (Number.isFinite(deadline) && Date.now() > deadline) {
        this.counters.expiredRequests += 1;
        this.log.debug?.(`request ${correlationId} on ${pattern} (${message.id}) expired before a handler was free: skipped`);
        return;
      }
      try {
        const result = await handler(message.payload, context);
        body = { responses: await lastValueFrom(this.transformToObservable(result).pipe(toArray())) };
      } catch (error) {
        body = { err: serializeError(error) };
      }
    }
    await this.reply(pattern, address, body);
  }

  /** A request whose reply address is refused: one visible error (a log line, an `error` event, `refusedRequests`). */
  private refuse(pattern: string, message: StreamMessage, refusal: string, isEvent: boolean): void {
    this.counters.refusedRequests += 1;
    const error = new Error(
      `RedisStreamsServer: request ${message.id} on ${pattern} (shard ${message.shardIndex}) refused: ${refusal}; ${isEvent ? 'handled as an event, ' : ''}answered nowhere and acknowledged`,
    );
    this.throttled.warn(`refused:${pattern}`, error.message);
    this.events.emit('error', error);
  }

  private async reply(pattern: string, address: { inbox: string; correlationId: string; request: string }, body: ReplyBody): Promise<void> {
    const { inbox, correlationId } = address;
    let json: string;
    try {
      json = JSON.stringify(body);
    } catch (error) {
      // A response JSON cannot carry (a BigInt, a cycle): the requester gets an error, not a timeout.
      json = JSON.stringify({
        err: {
          status: 'error',
          message: `RedisStreamsServer: the reply of ${pattern} cannot be serialized as JSON: ${(error as Error).message}`,
        },
      });
    }
    let written: boolean;
    try {
      written = await writeReply(this.connection!.client, inbox, correlationId, address.request, json);
    } catch (error) {
      this.counters.failedReplies += 1;
      const failure = new Error(
        `RedisStreamsServer: the reply to request ${correlationId} on ${pattern} was not written to ${inbox}: ${(error as Error).message}; the request is retried`,
      );
      this.throttled.warn(`reply:${pattern}`, failure.message);
      this.events.emit('error', failure);
      throw failure;
    }
    if (!written) {
      this.counters.droppedReplies += 1;
      this.log.debug?.(
        `reply to request ${correlationId} on ${pattern} dropped: inbox ${inbox} no longer exists (its client closed or stopped refreshing it)`,
      );
    }
  }
}

/**
 * Waits for what a Nest handler answered: an observable (an interceptor's, or an exception filter's
 * error) decides once subscribed. A failure is the exception the handler (or its guard, pipe,
 * interceptor) threw, as thrown (`thrown`): the dead letter keeps its name, message and stack, and
 * `deadLetter.nonRetryableErrors` sees its class. Without one (a filter failed with a value of its
 * own), Nest's RPC answer (`{ status, message }`) becomes an Error carrying it as JSON.
 */
async function settle(pattern: string, result: unknown, thrown: ThrownByCall): Promise<void> {
  if (!isObservable(result)) return;
  try {
    await lastValueFrom(result, { defaultValue: undefined });
  } catch (error) {
    if (thrown.thrown) throw thrown.error;
    if (error instanceof Error) throw error;
    throw new Error(`${pattern}: the handler failed: ${safeJson(error)}`, { cause: error });
  }
}

function safeJson(value: unknown): string {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

/** An error as a reply can carry it: Nest's RPC errors are plain objects already; an Error keeps its name and message. */
function serializeError(error: unknown): unknown {
  if (error instanceof Error) return { name: error.name, message: error.message };
  return error ?? { status: 'error', message: 'unknown error' };
}
