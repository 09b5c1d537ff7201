/**
 * The Nest transport in a process of its own, for the reliability soak (test/reliability/transport-actors.ts):
 * started by a driver with its settings in the RSC_TRANSPORT_PROCESS environment variable (JSON),
 * it runs one of two roles over one Redis URL (the driver's proxy in front of the soak's Redis):
 *
 * - `server`: a Nest microservice on RedisStreamsServer with a `@MessagePattern` handler that answers
 *   each request with its sequence number, and an `@EventPattern` handler that records each event;
 *   every acknowledgement its members report is recorded too. SIGTERM closes the app (in-flight
 *   handlers finish, acks land), records the server's counters and exits.
 * - `client`: a CoordinatorClientProxy that sends `ratePerSecond` requests and as many events a
 *   second, recording what each request settled with. SIGTERM stops sending, waits (bounded) until
 *   every request and event settled, records the client's counters, closes and exits.
 *
 * Each prints "ready" once it can work (the server: every member joined). Record lines, one JSON
 * line per `write` (what returned before a SIGKILL is in the file), every one with t (wall-clock ms,
 * from `performance`) and r (the role):
 * server: { e: 'request', q, s, id, dc }            the request handler ran for request q (entry s/id)
 *         { e: 'event-start' | 'event-end', q, s, id } the event handler began / returned for event q
 *         { e: 'ack', st, s, ids, ok }             a member's acknowledgement of entries of stream st
 *         { e: 'refused', s, id, msg }             a request refused (its reply address is not an inbox)
 *         { e: 'error', msg }, { e: 'stats', ... }  other errors; the server's counters at the end
 * client: { e: 'send', q } then { e: 'reply', q, v }* and one of { e: 'complete', q } / { e: 'failed', q, name, msg }
 *         { e: 'emit', q } then { e: 'emitted', q, ok, msg? }
 *         { e: 'unsettled', requests, events }     what had not settled when the client gave up waiting at the end
 *         { e: 'stats', ... }                      the client's counters at the end
 */
import fs from 'node:fs';
import { Controller, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Ctx, EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { lastValueFrom } from 'rxjs';
import { CoordinatorClientProxy } from '../microservices/coordinator-client.proxy';
import { RedisStreamsContext } from '../microservices/redis-streams.context';
import { RedisStreamsServer } from '../microservices/redis-streams.server';

export interface TransportProcessSettings {
  role: 'server' | 'client';
  /** The Redis (the driver's proxy in front of it). */
  url: string;
  keyPrefix: string;
  /** The stream prefixes of the requests (`@MessagePattern`) and of the events (`@EventPattern`). */
  requestStream: string;
  eventStream: string;
  consumerGroup: string;
  recordFile: string;
  /** The streams are created with this many shards when missing (by the server's members and the client's producers). */
  shardCount: number;
  /** Server: its members' session and heartbeat interval; how long the event handler takes. */
  sessionTimeoutMs: number;
  heartbeatIntervalMs: number;
  handlerDelayMs: number;
  /** Client: `timeoutMs` of every send(); requests (and as many events) a second, numbered from `firstSeq`. */
  timeoutMs: number;
  ratePerSecond: number;
  firstSeq: number;
}

export const TRANSPORT_PROCESS_ENV = 'RSC_TRANSPORT_PROCESS';

/** How long the server waits for its members to join before it gives up (exit code 3). */
const JOIN_DEADLINE_MS = 40_000;

/** The client's wait at the end for what it sent to settle, beyond the request timeout: an emit's send has its own deadline. */
const SETTLE_GRACE_MS = 10_000;

/** Attempts of the server's members: a reply write that fails is retried with its request, and must not dead-letter under a short fault. */
const SERVER_MAX_ATTEMPTS = 10;

/** Appends one line to the record file. */
type Recorder = (line: { [field: string]: unknown }) => void;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function runServer(settings: TransportProcessSettings, record: Recorder): Promise<void> {
  @Controller()
  class TransportController {
    @MessagePattern<string>(settings.requestStream)
    answer(@Payload() payload: { seq?: number }, @Ctx() context: RedisStreamsContext) {
      record({ e: 'request', q: payload.seq, s: context.getShardIndex(), id: context.getEntryId(), dc: context.getDeliveryCount() });
      return { seq: payload.seq };
    }

    @EventPattern<string>(settings.eventStream)
    async handle(@Payload() payload: { seq?: number }, @Ctx() context: RedisStreamsContext) {
      const base = { q: payload.seq, s: context.getShardIndex(), id: context.getEntryId() };
      record({ e: 'event-start', ...base });
      await sleep(settings.handlerDelayMs);
      record({ e: 'event-end', ...base });
    }
  }
  @Module({ controllers: [TransportController] })
  class TransportModule {}

  const server = new RedisStreamsServer({
    redis: { url: settings.url },
    coordinator: { keyPrefix: settings.keyPrefix, heartbeatIntervalMs: settings.heartbeatIntervalMs },
    consumerGroup: settings.consumerGroup,
    shardCount: settings.shardCount,
    sessionTimeoutMs: settings.sessionTimeoutMs,
    maxAttempts: SERVER_MAX_ATTEMPTS,
    retryBackoffMs: 50,
    startRetryDelayMs: 200,
  });
  server.on('error', (error: Error) => {
    const refused = /request (\S+) on .* \(shard (\d+)\) refused/.exec(error.message);
    if (refused) record({ e: 'refused', s: Number(refused[2]), id: refused[1], msg: error.message });
    else record({ e: 'error', msg: error.message });
  });
  const app = await NestFactory.createMicroservice(TransportModule, { strategy: server, logger: false });
  await app.listen();
  // The members exist once listen() returned, and start in the background: no acknowledgement is missed.
  for (const member of server.unwrap().members) {
    const stream = member.options.streamPrefix;
    member.on('acknowledged', (a) => record({ e: 'ack', st: stream, s: a.shardIndex, ids: a.ids, ok: a.accepted }));
  }
  const deadline = Date.now() + JOIN_DEADLINE_MS;
  while (!server.stats().patterns.every((p) => p.members.every((m) => m.stats.joined))) {
    if (Date.now() > deadline) throw new Error(`the server's members had not joined after ${JOIN_DEADLINE_MS} ms`);
    await sleep(20);
  }
  process.once('SIGTERM', () => {
    void (async () => {
      await app.close();
      const { patterns: _, ...counters } = server.stats();
      record({ e: 'stats', ...counters });
      record({ e: 'stopped' });
      process.exit(0);
    })();
  });
  process.stdout.write('ready\n');
}

async function runClient(settings: TransportProcessSettings, record: Recorder): Promise<void> {
  const client = new CoordinatorClientProxy({
    redis: { url: settings.url },
    keyPrefix: settings.keyPrefix,
    timeoutMs: settings.timeoutMs,
    producer: { shardCount: settings.shardCount },
  });
  await client.connect();
  const requests = new Set<Promise<void>>();
  const events = new Set<Promise<void>>();
  const track = (set: Set<Promise<void>>, promise: Promise<void>) => {
    set.add(promise);
    void promise.finally(() => set.delete(promise));
  };
  let seq = settings.firstSeq;
  const tick = setInterval(
    () => {
      const q = seq++;
      record({ e: 'send', q });
      track(
        requests,
        new Promise<void>((settled) => {
          client.send<{ seq: number }>(settings.requestStream, { seq: q }).subscribe({
            next: (value) => record({ e: 'reply', q, v: value?.seq }),
            error: (error: Error) => {
              record({ e: 'failed', q, name: error?.name, msg: error?.message ?? String(error) });
              settled();
            },
            complete: () => {
              record({ e: 'complete', q });
              settled();
            },
          });
        }),
      );
      record({ e: 'emit', q });
      track(
        events,
        lastValueFrom(client.emit(settings.eventStream, { seq: q }), { defaultValue: undefined }).then(
          () => record({ e: 'emitted', q, ok: true }),
          (error: Error) => record({ e: 'emitted', q, ok: false, msg: error?.message ?? String(error) }),
        ),
      );
    },
    Math.max(1, Math.round(1000 / settings.ratePerSecond)),
  );
  process.once('SIGTERM', () => {
    void (async () => {
      clearInterval(tick);
      const all = Promise.all([...requests, ...events]);
      await Promise.race([all, sleep(settings.timeoutMs + SETTLE_GRACE_MS)]);
      if (requests.size + events.size > 0) record({ e: 'unsettled', requests: requests.size, events: events.size });
      record({ e: 'stats', ...client.stats() });
      await client.close();
      record({ e: 'stopped' });
      process.exit(0);
    })();
  });
  process.stdout.write('ready\n');
}

function main(): void {
  const settings = JSON.parse(process.env[TRANSPORT_PROCESS_ENV] ?? '') as TransportProcessSettings;
  const fd = fs.openSync(settings.recordFile, 'a');
  const record: Recorder = (line) =>
    fs.writeSync(fd, `${JSON.stringify({ t: performance.timeOrigin + performance.now(), r: settings.role, ...line })}\n`);
  const run = settings.role === 'server' ? runServer : runClient;
  run(settings, record).catch((error: Error) => {
    record({ e: 'error', msg: `start failed: ${error.message}` });
    process.exit(3);
  });
}

if (require.main === module) main();
