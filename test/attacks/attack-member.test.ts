import { afterEach, describe, expect, it } from 'vitest';
import { CoordinatorAdmin, KeyBuilder, StreamProducer } from '@redis-stream-coordinator/core';
import { HandlerRecorder } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { type HeldRequest, TcpProxy } from '../support/tcp-proxy';
import { proxyFactory } from '../support/proxy-fixture';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// Attacks on the member runtime after the error-path fixes (9f85442, b2493f9). Each test names the promise it breaks.
const redis = useRedisServer();
const aMember = memberFactory(redis, { retryBackoffMs: 1 });
const keys = new KeyBuilder();
const aProxy = proxyFactory(redis);
const holds: HeldRequest[] = [];

// Registered after the proxies' hook, so it runs first: held requests go on before the proxies stop.
afterEach(() => {
  for (const hold of holds.splice(0)) hold.release();
});

function send(streamPrefix: string, seqs: number[]) {
  return new StreamProducer(redis.client(), { streamPrefix }).sendBatch(seqs.map((seq) => ({ key: 'k', payload: { seq } })));
}

describe('attack: a blocking read that never comes back', () => {
  // SPEC 9.1: "when its reply never comes ... a shard is never left owned but unread". The blocking
  // XREADGROUP has no deadline of its own: when its request (or reply) is stuck on a half-open
  // connection (NAT/firewall state dropped, a failover behind a VIP; TCP retransmits for ~15 min),
  // CLIENT UNBLOCK on the other connection cannot reach it, the read loop awaits it forever, and
  // meanwhile heartbeats on the command connection keep the member ACTIVE and owning the shard:
  // claims, takeovers, sweeps and reads of every shard stop, stats() shows no problem.
  it('an XREADGROUP stuck on the reader connection is taken as lost after its deadline: the reader reconnects and the shard is read again', async () => {
    const streamPrefix = uniqueName('attack-stuck-read');
    const proxy = await aProxy();
    const recorder = new HandlerRecorder();
    const member = aMember(
      { streamPrefix, shardCount: 1, sessionTimeoutMs: 3000, blockMs: 300, sweepIntervalMs: 500, handler: recorder.handler('m') },
      redis.clientAt(proxy.url),
    );
    await member.start();
    await send(streamPrefix, [1]);
    await pollUntil('entry 1 handled', async () => recorder.runs.length === 1);

    const held = proxy.holdNextRequest(TcpProxy.command('XREADGROUP'));
    holds.push(held);
    await held.arrived; // the reader's next read is stuck between the member and Redis
    await send(streamPrefix, [2]);

    // Twenty block timeouts and ten sweep intervals later: entry 2 is handled, or the member at
    // least says something is wrong (stats().problems, health).
    const outcome = await pollUntil(
      'entry 2 handled or a problem reported',
      async () => (recorder.runs.some((r) => r.seq === 2) ? 'handled' : member.stats().problems.length > 0 ? 'reported' : false),
      { timeoutMs: 6000 },
    ).catch(() => ({ stranded: member.stats() }));
    expect(['handled', 'reported']).toContain(outcome);
    await member.stop(); // here, while the proxy is still up
  });

  // Same fault, then stop(): the poller's stop awaits the read loop, which awaits the stuck read; the
  // member keeps heartbeating while it "drains", so it never leaves and its shard never moves on.
  it('stop() during a stuck read returns, and the shard is handed to another member', async () => {
    const streamPrefix = uniqueName('attack-stuck-stop');
    const proxy = await aProxy();
    const recorder = new HandlerRecorder();
    const member = aMember(
      { streamPrefix, shardCount: 1, sessionTimeoutMs: 3000, blockMs: 300, shutdownTimeoutMs: 500, handler: recorder.handler('a') },
      redis.clientAt(proxy.url),
    );
    await member.start();
    await send(streamPrefix, [1]);
    await pollUntil('entry 1 handled', async () => recorder.runs.length === 1);
    const held = proxy.holdNextRequest(TcpProxy.command('XREADGROUP'));
    holds.push(held);
    await held.arrived;

    const other = aMember({ streamPrefix, shardCount: 1, handler: recorder.handler('b') });
    await other.start();
    let stopped = false;
    void member.stop().then(() => (stopped = true));
    await send(streamPrefix, [2]);
    const outcome = await pollUntil(
      'A stopped and B handled entry 2',
      async () => stopped && recorder.runs.some((r) => r.seq === 2 && r.memberId === 'b') && 'done',
      {
        timeoutMs: 8000,
      },
    ).catch(() => ({ stopped, aStats: member.stats(), bOwns: other.ownedShards() }));
    expect(outcome).toBe('done');
  });
});

describe('attack: a handler that outlives its grant, then the same shard comes back', () => {
  // SPEC 5: one handler at a time per shard. A member that loses its lease drops its shards but
  // cannot stop a running handler. When it rejoins and is granted the same shard again, the new
  // grant's takeover claims the entry that handler is still running (it is pending under the same
  // consumer name) and starts it again: two runs of one entry, in one process, at the same time.
  // Nothing ties the new grant's dispatch to the old grant's in-flight work.
  it("after lease-lost and rejoin, the new grant waits for the old grant's running handler before it runs the entry again", async () => {
    const streamPrefix = uniqueName('attack-regrant');
    const proxy = await aProxy();
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let running = 0;
    let maxRunning = 0;
    const runs: number[] = [];
    const member = aMember(
      {
        streamPrefix,
        shardCount: 1,
        sessionTimeoutMs: 2000,
        runtimeMaxConcurrency: 2,
        handler: async (m) => {
          runs.push(m.payload.seq);
          running += 1;
          maxRunning = Math.max(maxRunning, running);
          try {
            if (m.payload.seq === 1) await gate;
          } finally {
            running -= 1;
          }
        },
      },
      redis.clientAt(proxy.url),
    );
    const lost: unknown[] = [];
    member.on('lease-lost', (e) => lost.push(e));
    member.on('fenced', (e) => lost.push(e));
    await member.start();
    await send(streamPrefix, [1]);
    await pollUntil('entry 1 running', async () => running === 1);

    proxy.delay('request', 2500); // heartbeats arrive after the session timeout: the lease is lost
    await pollUntil('lease lost', async () => lost.length > 0, { timeoutMs: 8000 });
    proxy.delay('request', 0);
    try {
      await pollUntil(
        'shard 0 granted again, or entry 1 run twice',
        async () =>
          (member.ownedShards().includes(0) && member.stats().activeHandlers === 1 && runs.length >= 1 && 'owned') || runs.length >= 2,
        { timeoutMs: 8000 },
      );
      // Give the new grant's takeover every chance to start entry 1 again (it would within a loop).
      await pollUntil(
        'second run started or takeover done',
        async () =>
          runs.length >= 2 ||
          (member.stats().bufferedEntries === 0 &&
            member.ownedShards().includes(0) &&
            (await redis.client().xpending(keys.shardStream(streamPrefix, 0), 'group'))[0] === 1 &&
            'quiet'),
        { timeoutMs: 3000 },
      ).catch(() => undefined);
      expect({ runs, maxRunning }).toEqual({ runs: [1], maxRunning: 1 });
      // The wait is visible while it lasts (a handler that never settles would hold the shard).
      expect(member.stats().problems).toEqual([expect.stringMatching(/shard 0: waiting for the handler of .* from an earlier grant/)]);
    } finally {
      release();
    }
    // Once the first run is over, the new grant runs the entry again (its first ack was refused):
    // at-least-once, one at a time.
    await pollUntil('entry 1 run again after the first run ended', async () => runs.length === 2);
    expect(maxRunning).toBe(1);
  });
});

describe('attack: the two sweeps of one shard, and a handler finishing between them', () => {
  // SPEC 5 per-shard order. sweep() first claims other consumers' pending entries (a zombie's late
  // read: 4, 5) and queues them, then, three round trips later, finds this member's own untracked
  // entries (2, 3 from a lost XREADGROUP reply) and queues them before. If the shard's running
  // handler finishes in between, the dispatcher starts 4 before 2 and 3 are even queued.
  it("own entries of a lost read reply run before a zombie's later entries the other sweep queued first", async () => {
    const streamPrefix = uniqueName('attack-sweeps');
    const stream = keys.shardStream(streamPrefix, 0);
    const proxy = await aProxy();
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const order: number[] = [];
    const member = aMember(
      {
        streamPrefix,
        shardCount: 1,
        sweepIntervalMs: 1000,
        blockMs: 10_000,
        handler: async (m) => {
          order.push(m.payload.seq);
          if (m.payload.seq === 1) await gate;
        },
      },
      redis.clientAt(proxy.url),
    );
    try {
      await member.start();
      await send(streamPrefix, [1]);
      await pollUntil('entry 1 running', async () => order.length === 1);

      // B's next read gets 2 and 3, and its reply is lost; ioredis resends the read, which we hold.
      let armed: () => void = () => undefined;
      const readWaiting = new Promise<void>((resolve) => (armed = resolve));
      const dropped = proxy.dropNextReply(TcpProxy.command('XREADGROUP'), armed);
      await readWaiting;
      const resent = proxy.holdNextRequest(TcpProxy.command('XREADGROUP'));
      holds.push(resent);
      await send(streamPrefix, [2, 3]);
      await dropped;
      await resent.arrived;

      // A zombie's read that reached Redis late takes 4 and 5.
      await send(streamPrefix, [4, 5]);
      const zombie = await redis.client().xreadgroup('GROUP', 'group', 'zombie', 'COUNT', 10, 'STREAMS', stream, '>');
      expect((zombie as [string, [string, string[]][]][])[0][1]).toHaveLength(2);

      // Hold the own-pending sweep's XPENDING (- +): the other-consumers sweep has queued 4 and 5 by then.
      const ownSweep = proxy.holdNextRequest(
        (request) => request.toUpperCase().includes('XPENDING') && request.includes('$1\r\n-\r\n$1\r\n+\r\n'),
      );
      holds.push(ownSweep);
      resent.release();
      await ownSweep.arrived;
      release(); // entry 1 ends now: the dispatcher looks for the shard's next entry
      await pollUntil(
        'entry 4 started, or the dispatcher kept waiting',
        async () => order.length > 1 || (member.stats().activeHandlers === 0 && 'idle'),
        { timeoutMs: 2000 },
      );
      ownSweep.release();
      await pollUntil('all five handled', async () => new Set(order).size === 5, { timeoutMs: 8000 });
      expect(order).toEqual([1, 2, 3, 4, 5]);
    } finally {
      release();
    }
  });
});

describe('attack: stop() while the join is under way', () => {
  // stop() drains and leaves only a member that `hasJoined`; that is set when the first answer is
  // processed. If stop() comes after the join ran in Redis but before its answer arrived, the answer
  // is dropped (`!heartbeating()`), no leave is sent, and the coordinator counts the member as
  // ACTIVE until its session times out: the shards the new target gives it (revoked from their
  // owners) are read by no one meanwhile.
  it('a member stopped while its join answer is on the way still leaves the group', async () => {
    const streamPrefix = uniqueName('attack-stop-joining');
    const admin = new CoordinatorAdmin(redis.client());
    const owner = aMember({ streamPrefix, shardCount: 2, handler: () => undefined });
    await owner.start();
    await pollUntil('owner holds both shards', async () => owner.ownedShards().length === 2);

    const proxy = await aProxy();
    const joining = aMember({ streamPrefix, sessionTimeoutMs: 10_000, handler: () => undefined }, redis.clientAt(proxy.url));
    // The join (the first heartbeat, the first script call naming the member) waits at the proxy
    // until its answers are late; then it runs at once and its answer is late. Late from the start,
    // every call of start() before the join was late too: seconds of this file's time.
    const join = proxy.holdNextRequest(TcpProxy.command('EVALSHA', joining.memberId));
    holds.push(join);
    const started = joining.start().catch(() => 'rejected');
    await join.arrived;
    proxy.delay('reply', 1500);
    join.release();
    await pollUntil('the join ran in Redis', async () =>
      (await admin.describeGroup(streamPrefix, 'group')).members.some((m) => m.memberId === joining.memberId),
    );
    await joining.stop();
    await started;
    proxy.delay('reply', 0);

    const description = await pollUntil(
      'the stopped member gone, both shards read by the owner',
      async () => {
        const d = await admin.describeGroup(streamPrefix, 'group');
        const active = d.members.filter((m) => m.state === 'ACTIVE').map((m) => m.memberId);
        return active.length === 1 && owner.ownedShards().length === 2 && ['settled'];
      },
      { timeoutMs: 4000 },
    ).catch(async () =>
      (await admin.describeGroup(streamPrefix, 'group')).members.map(
        (m) => `${m.memberId === joining.memberId ? 'stopped' : 'owner'}: ${m.state}`,
      ),
    );
    expect(description).toEqual(['settled']);
  });
});
