/**
 * The Nest transport as the soak's own actors (docs/nestjs.md, the microservices transport; SPEC
 * 10.1, 10.4): a server process (a Nest microservice on RedisStreamsServer, a request handler that
 * answers and an event handler that records) and a client process (CoordinatorClientProxy sending
 * requests and events), each behind its own proxy, while the members and the load go on. On their
 * links, in an order the seed decides: delays both ways, a reply held until after the client's
 * timeout (a late reply), a reply lost with its connection on either side, and a half-open
 * connection on each side (the client's inbox reader, the server's doorbell). Meanwhile an attacker writes
 * requests whose `rsc-reply-to` names keys that are no inbox of the transport. What the processes
 * recorded and what Redis holds afterwards go to `h.transportEpisodes`; the checker's `transport`
 * (transport-outcomes.ts) holds them to their promises.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { KeyBuilder, StreamProducer } from '@redis-stream-coordinator/core';
import type { TransportProcessSettings } from '../../packages/nestjs/src/testing/transport-process';
import { deferralOf } from '../../packages/core/src/protocol/entry-format';
import { findGroupInfo } from '../../packages/core/src/redis/responses';
import { TcpProxy } from '../support/tcp-proxy';
import type { ChaosHarness } from './harness';
import { readRecords, readyOf, sleep, waitFor } from './harness-tools';
import type { Fault, TransportEpisode, TransportLine, TransportLinkFault } from './records';
import { scriptCall } from './script-match';
import { INBOX_READER_HALF_OPEN } from './transport-outcomes';

/** The transport process entry point, built by `npm run build` (packages/nestjs). */
const TRANSPORT_PROCESS = path.resolve(__dirname, '../../packages/nestjs/dist/testing/transport-process.js');

/** A key prefix of its own: nothing of the harness (dead letters, group scans) mistakes the transport's keys for the members'. */
const KEY_PREFIX = 'rsc-transport';
const REQUEST_STREAM = 'chaos-rpc';
const EVENT_STREAM = 'chaos-events';
const CONSUMER_GROUP = 'chaos-transport';
const SHARDS = 4;

/**
 * The client's send() timeout: short, so that a late reply comes after it within the fault, yet
 * long enough for answers on this loaded machine (at 1 s, a run at a load of 20 had every one of
 * its 117 requests time out, 24 at a load of 12: the server's reads came in bursts about a second apart).
 */
const TIMEOUT_MS = 2000;
/** Requests (and as many events) a second: a few dozen of each per fault. */
const RATE_PER_SECOND = 20;
/** The server's session: its connection held by a late reply (TIMEOUT_MS + LATE_BY_MS) must not expire it. */
const SERVER_SESSION_MS = 3000;

/** How long the delays both ways last, and their size (below the timeout: requests still answered). */
const DELAY_HOLD_MS = 800;
const DELAY_MS = 60;
/** How far past the client's timeout a held reply lands. */
const LATE_BY_MS = 300;
/**
 * How long the link faults wait with a connection half-open: past the client's inbox read deadline
 * (its block, 1 s, plus max(2 s, block)). The silenced connections stay so for good; the server's
 * doorbell (its block, 5 s, plus 2 s) is reset within the drain that follows.
 */
const HALF_OPEN_HOLD_MS = 3500;
/** How long a fault waits for the request it acts on (the actors send a few a second). */
const MATCH_WAIT_MS = 3000;
/**
 * Each run's requests and events are numbered from its number times this: an event a run left
 * unhandled (reported there), handled by the next run's server, is not taken for one of its own.
 */
const SEQS_PER_EPISODE = 1_000_000;
/** Quiet link before and after the faults. */
const CLEAN_MS = 300;
/** How long the server may take to handle what was sent once the links are fast again, and each process to stop. */
const DRAIN_MS = 15_000;
const STOP_MS = TIMEOUT_MS + 15_000;
/**
 * How long a process may take to be ready: a Nest application's start (its modules loaded, its
 * members joined) took 14 s on this 2-core machine at a load of 14; past this it is a failure.
 */
const READY_MS = 45_000;

interface TransportActor {
  child: ReturnType<typeof spawn>;
  proxy: TcpProxy;
  recordFile: string;
  exited: Promise<number | null>;
}

type LinkFaultKind = 'delay' | 'late-reply' | 'reply-lost' | 'write-reply-lost' | 'half-open';
const LINK_FAULTS: LinkFaultKind[] = ['delay', 'late-reply', 'reply-lost', 'write-reply-lost', 'half-open'];

/** A reply's write: the server's XADD to an inbox. */
const replyWrite = TcpProxy.command('XADD', ':inbox:');

export async function transportActors(h: ChaosHarness, fault: Fault): Promise<{ liftedAt: number }> {
  if (!fs.existsSync(TRANSPORT_PROCESS)) throw new Error(`${TRANSPORT_PROCESS} is missing: run npm run build first`);
  const at = performance.timeOrigin + performance.now();
  const dir = path.join(h.dir, 'transport');
  fs.mkdirSync(dir, { recursive: true });
  const number = h.transportEpisodes.length + 1;
  const keys = new KeyBuilder(KEY_PREFIX);
  const actors: TransportActor[] = [];
  const linkFaults: TransportLinkFault[] = [];
  const targets = await forgeTargets(h, keys);
  // How long each phase took (ms), for the fault's detail: process start, link faults, drain and stop, Redis checks.
  const phases: number[] = [];
  let mark = performance.now();
  const phase = () => {
    phases.push(Math.round(performance.now() - mark));
    mark = performance.now();
  };
  try {
    // The server's wire, watched from its first byte: a reply written to a key that is no inbox
    // counts even if Redis refused it (WRONGTYPE) or a trim took it before the scan at the end.
    const replyKeys: string[] = [];
    const [server, client] = await Promise.all([
      startActor(h, 'server', path.join(dir, `server-${number}.jsonl`), actors, (proxy) =>
        proxy.watchRequests((r) => replyKeys.push(...replyWriteKeys(r))),
      ),
      startActor(h, 'client', path.join(dir, `client-${number}.jsonl`), actors, undefined, number * SEQS_PER_EPISODE),
    ]);
    phase();
    await sleep(CLEAN_MS);
    const forged = await forge(h, keys, targets);
    const order = [...LINK_FAULTS].sort(() => h.random() - 0.5);
    for (const kind of order) await linkFault(h, kind, server, client, linkFaults);
    server.proxy.clearFaults();
    client.proxy.clearFaults();
    await sleep(CLEAN_MS);
    phase();
    await stopActor(client, 'client');
    const sent = transportLines(client.recordFile);
    const emitted = new Set(sent.filter((l) => l.e === 'emitted' && l.ok).map((l) => l.q));
    const forgedIds = new Set(forged.map((f) => `${f.shard}/${f.id}`));
    // Everything emitted handled and every forged request refused before the server stops: what it
    // still had then would be a loss of the stop, not of the faults.
    await waitFor(
      `the transport server to handle ${emitted.size} events and refuse ${forged.length} forged requests`,
      () => {
        const lines = transportLines(server.recordFile);
        const handled = new Set(lines.filter((l) => l.e === 'event-end').map((l) => l.q));
        const refused = new Set(lines.filter((l) => l.e === 'refused').map((l) => `${l.s}/${l.id}`));
        return [...emitted].every((q) => handled.has(q)) && [...forgedIds].every((id) => refused.has(id));
      },
      DRAIN_MS,
      100,
    ).catch(() => undefined); // what is missing is the checker's to report
    await stopActor(server, 'server');
    phase();
    const episode: TransportEpisode = {
      at,
      timeoutMs: TIMEOUT_MS,
      requestStream: REQUEST_STREAM,
      eventStream: EVENT_STREAM,
      server: transportLines(server.recordFile),
      client: transportLines(client.recordFile),
      forged,
      targetsTouched: await touchedTargets(h, targets),
      strayReplies: [
        ...replyKeys.filter((key) => !INBOX.test(key)).map((key) => `${key} (a reply's XADD on the server's link)`),
        ...(await strayReplies(h, Math.floor(at) - 1000)),
      ],
      unacknowledged: await transportUnacknowledged(h, keys),
      linkFaults,
    };
    phase();
    h.transportEpisodes.push(episode);
    const count = (lines: TransportLine[], e: string, more: (l: TransportLine) => boolean = () => true) =>
      lines.filter((l) => l.e === e && more(l)).length;
    fault.detail = `(${linkFaults.map((f) => `${f.link} ${f.what}`).join(', ')}: ${count(episode.client, 'send')} requests, ${count(episode.client, 'complete')} answered, ${count(episode.client, 'failed', (l) => l.name === 'RequestTimeoutError')} timed out; ${count(episode.client, 'emitted', (l) => l.ok === true)} events; ${forged.length} forged, ${count(episode.server, 'refused')} refused; ${phases.join(' + ')} ms to start, fault, stop, check)`;
  } finally {
    for (const actor of actors) {
      actor.child.kill('SIGKILL');
      await actor.exited;
      await actor.proxy.stop();
    }
    await h.redis.del(...targets.filter((t) => t.made).map((t) => t.key)).catch(() => undefined);
  }
  return { liftedAt: performance.now() };
}

/** The lines of a transport process's record file (one JSON object a line, as a member process writes them). */
const transportLines = (file: string) => readRecords(file) as unknown as TransportLine[];

async function startActor(
  h: ChaosHarness,
  role: 'server' | 'client',
  recordFile: string,
  actors: TransportActor[],
  onProxy: (proxy: TcpProxy) => void = () => undefined,
  firstSeq = 0,
): Promise<TransportActor> {
  const proxy = (await h.target.proxy())!;
  onProxy(proxy);
  const settings: TransportProcessSettings = {
    role,
    url: proxy.url,
    keyPrefix: KEY_PREFIX,
    requestStream: REQUEST_STREAM,
    eventStream: EVENT_STREAM,
    consumerGroup: CONSUMER_GROUP,
    recordFile,
    shardCount: SHARDS,
    sessionTimeoutMs: SERVER_SESSION_MS,
    heartbeatIntervalMs: Math.floor(SERVER_SESSION_MS / 5),
    handlerDelayMs: 2,
    timeoutMs: TIMEOUT_MS,
    ratePerSecond: RATE_PER_SECOND,
    firstSeq,
  };
  const child = spawn(process.execPath, [TRANSPORT_PROCESS], {
    env: { ...process.env, RSC_TRANSPORT_PROCESS: JSON.stringify(settings) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const actor: TransportActor = {
    child,
    proxy,
    recordFile,
    exited: new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code))),
  };
  actors.push(actor);
  await readyOf(child, `transport ${role}`, recordFile, READY_MS);
  return actor;
}

/** SIGTERM, and its exit within STOP_MS (the client waits for what it sent to settle first). */
async function stopActor(actor: TransportActor, role: string): Promise<void> {
  actor.child.kill('SIGTERM');
  const exited = await Promise.race([actor.exited.then(() => true), sleep(STOP_MS).then(() => false)]);
  if (!exited) throw new Error(`transport ${role} had not stopped ${STOP_MS} ms after SIGTERM`);
}

/** One fault on the actors' links, recorded with when it was on. */
async function linkFault(
  h: ChaosHarness,
  kind: LinkFaultKind,
  server: TransportActor,
  client: TransportActor,
  faults: TransportLinkFault[],
): Promise<void> {
  const now = () => performance.timeOrigin + performance.now();
  const began = now();
  let unmatched = false;
  const done = (link: 'server' | 'client', what: string, redelivers: boolean) =>
    faults.push({
      link,
      what: `${what}${unmatched ? ` (no matching request in ${MATCH_WAIT_MS} ms)` : ''}`,
      at: began,
      until: now(),
      redelivers,
    });
  /** Waits for a rule's match, bounded: false when none came (the fault says so). */
  const matched = async (armed: Promise<void>) => {
    const came = await Promise.race([armed.then(() => true), sleep(MATCH_WAIT_MS).then(() => false)]);
    unmatched = !came;
    return came;
  };
  switch (kind) {
    case 'delay':
      for (const actor of [server, client]) {
        actor.proxy.delay('request', DELAY_MS, DELAY_MS / 2);
        actor.proxy.delay('reply', DELAY_MS, DELAY_MS / 2);
      }
      await sleep(DELAY_HOLD_MS);
      server.proxy.clearFaults();
      client.proxy.clearFaults();
      done('server', 'delay', false);
      done('client', 'delay', false);
      return;
    case 'late-reply': {
      // One reply's write waits at the server's proxy until after the client's timeout, then lands:
      // the client must have failed that request at its timeout and drop the reply.
      const held = server.proxy.holdNextRequest(replyWrite);
      if (await matched(held.arrived)) await sleep(TIMEOUT_MS + LATE_BY_MS);
      held.release();
      done('server', 'late-reply', false);
      return;
    }
    case 'reply-lost': {
      // A reply lands in the inbox and its answer to the server is lost with the connection: written
      // again (a resend, or the request retried), the client must answer its caller once.
      const dropped = server.proxy.dropNextReply(replyWrite);
      if (!(await matched(dropped))) server.proxy.clearFaults();
      done('server', 'reply-lost', true);
      return;
    }
    case 'write-reply-lost': {
      // A request's or an event's write lands, its answer to the client is lost with the connection.
      const stream = h.random() < 0.5 ? REQUEST_STREAM : EVENT_STREAM;
      const write = scriptCall('appendEntries');
      const dropped = client.proxy.dropNextReply((request) => write(request) && request.includes(`{${stream}:`));
      if (!(await matched(dropped))) client.proxy.clearFaults();
      done('client', `write-reply-lost (${stream})`, true);
      return;
    }
    case 'half-open': {
      // One connection on each side goes silent both ways, never closed, at once: the client's inbox
      // reader and the server's doorbell (its members share one read hub), each an XREAD BLOCK that
      // only its own connection carries. Each must find out and reset it (SPEC 10.1).
      const blocking = TcpProxy.command('XREAD', 'BLOCK');
      const silenced = await Promise.all([client, server].map((actor) => matched(actor.proxy.blackholeConnectionOf(blocking))));
      if (silenced.some(Boolean)) await sleep(HALF_OPEN_HOLD_MS);
      for (const [i, actor] of [client, server].entries()) {
        actor.proxy.clearFaults();
        unmatched = !silenced[i];
        done(actor === client ? 'client' : 'server', actor === client ? INBOX_READER_HALF_OPEN : 'half-open (doorbell)', true);
      }
      return;
    }
  }
}

/** A key a forged request names as its reply address, and how to tell it was not written to. */
interface ForgeTarget {
  key: string;
  /** `still`: exactly as it was; `absent`: still missing; `busy`: written by others, so only no reply entry in it. */
  expect: 'still' | 'absent' | 'busy';
  /** Made by the harness for the fault (deleted after). */
  made: boolean;
  before?: string;
}

/**
 * The attacker's targets: a shard stream of the members' stream and one of the transport's own
 * request stream (a reply there would be read as a request), a stream named like an inbox but not
 * one (no UUID), a missing key of the same shape, and a real inbox's name under another key prefix.
 */
async function forgeTargets(h: ChaosHarness, keys: KeyBuilder): Promise<ForgeTarget[]> {
  const targets: ForgeTarget[] = [
    { key: h.admin.keys.shardStream(h.streamPrefix, 0), expect: 'busy', made: false },
    { key: keys.shardStream(REQUEST_STREAM, 0), expect: 'busy', made: false },
    { key: `${KEY_PREFIX}:inbox:decoy`, expect: 'still', made: true },
    { key: `${KEY_PREFIX}:inbox:{not-a-uuid}`, expect: 'absent', made: false },
    { key: `${h.admin.keys.keyPrefix}:inbox:{${randomUUID()}}`, expect: 'still', made: true },
  ];
  for (const target of targets) {
    if (target.made) await h.redis.xadd(target.key, '*', 'decoy', '1');
    target.before = await snapshot(h, target);
  }
  return targets;
}

async function snapshot(h: ChaosHarness, target: ForgeTarget): Promise<string> {
  if (target.expect === 'absent') return String(await h.redis.exists(target.key));
  if (target.expect === 'still') return JSON.stringify(await h.redis.xrange(target.key, '-', '+'));
  return '';
}

/** One forged request per target, through a producer as anyone with the Redis could write it. */
async function forge(h: ChaosHarness, keys: KeyBuilder, targets: ForgeTarget[]): Promise<TransportEpisode['forged']> {
  const producer = new StreamProducer(h.redis, { streamPrefix: REQUEST_STREAM, keyPrefix: keys.keyPrefix, shardCount: SHARDS });
  const forged: TransportEpisode['forged'] = [];
  for (const [i, target] of targets.entries()) {
    const written = await producer.send({
      payload: { seq: -1 - i },
      headers: {
        'rsc-reply-to': target.key,
        'rsc-correlation-id': randomUUID(),
        'rsc-reply-deadline': String(Date.now() + 60_000),
      },
    });
    forged.push({ shard: written.shardIndex, id: written.id, replyTo: target.key });
  }
  return forged;
}

async function touchedTargets(h: ChaosHarness, targets: ForgeTarget[]): Promise<string[]> {
  const touched: string[] = [];
  for (const target of targets) {
    if (target.expect === 'busy') continue; // the scan for stray replies covers it
    const after = await snapshot(h, target);
    if (after !== target.before) touched.push(`${target.key} changed: was ${target.before}, now ${after}`);
  }
  return touched;
}

const INBOX = new RegExp(`^${KEY_PREFIX}:inbox:\\{[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\\}$`);
/** Entries read per XRANGE while scanning for replies. */
const SCAN_PAGE = 1000;

/** A reply's write as RESP: XADD, its key, then NOMKSTREAM (reply-writer.ts), in one request chunk. */
const REPLY_XADD = /\*\d+\r\n\$4\r\nXADD\r\n\$\d+\r\n([^\r]*)\r\n\$10\r\nNOMKSTREAM\r\n/gi;

/** The keys of the reply writes in one request chunk. */
function replyWriteKeys(request: string): string[] {
  return [...request.matchAll(REPLY_XADD)].map((m) => m[1]);
}

/**
 * Every entry since `fromMs` in any stream but the transport's inboxes that has a reply's fields (`q`
 * and `r`) and is no deferral (docs/runtime.md, Deferred retries: an entry appended again behind its
 * key's copies has `q` and `r` among its fields, with `g` and `a`).
 */
async function strayReplies(h: ChaosHarness, fromMs: number): Promise<string[]> {
  const stray: string[] = [];
  let cursor = '0';
  do {
    const [next, found] = await h.redis.scan(cursor, 'COUNT', 1000, 'TYPE', 'stream');
    cursor = next;
    for (const key of found) {
      if (INBOX.test(key)) continue;
      let from = `${fromMs}-0`;
      for (;;) {
        const entries = await h.redis.xrange(key, from, '+', 'COUNT', SCAN_PAGE);
        for (const [id, fields] of entries) {
          const names = new Set(fields.filter((_, i) => i % 2 === 0));
          // A deferring group's entry appended again carries `q` and `r` too, beside `g` and `a`: a deferral, no reply.
          if (names.has('q') && names.has('r') && deferralOf(fields) === undefined) stray.push(`${key} ${id}`);
        }
        if (entries.length < SCAN_PAGE) break;
        from = `(${entries[entries.length - 1][0]}`;
      }
    }
  } while (cursor !== '0');
  return stray;
}

/**
 * "stream shard/id" of the event stream's entries the group has not acknowledged (pending, or not
 * delivered). Not the requests': a request nobody waits for any more may rightly stay unread when the
 * server stops (the next server skips it as expired), and its promise is the client's outcome.
 */
async function transportUnacknowledged(h: ChaosHarness, keys: KeyBuilder): Promise<string[]> {
  const open: string[] = [];
  for (const stream of [EVENT_STREAM]) {
    for (let shard = 0; shard < SHARDS; shard++) {
      const key = keys.shardStream(stream, shard);
      const info = await h.redis.xinfo('GROUPS', key).catch(() => []);
      const mine = findGroupInfo(info, CONSUMER_GROUP);
      for (const [id] of await h.redis.xrange(key, `(${mine?.lastDelivered ?? '0-0'}`, '+')) open.push(`${stream} ${shard}/${id}`);
      if (mine)
        for (const [id] of (await h.redis.xpending(key, CONSUMER_GROUP, '-', '+', 10_000)) as [string][])
          open.push(`${stream} ${shard}/${id}`);
    }
  }
  return open;
}
