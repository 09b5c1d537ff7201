import { describe, expect, it } from 'vitest';
import { CoordinatedMember } from '@redis-stream-coordinator/core';
import { WakeHub } from '../../packages/core/src/redis/read-hubs/wake-hub';
import { TcpProxy } from '../support/tcp-proxy';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();

describe('WakeHub', () => {
  it('after its connection is killed it subscribes again itself, tells every listener at once (wake-ups were lost), and hears new ones', async () => {
    const base = redis.client();
    const channel = uniqueName('wake');
    const heard: string[] = [];
    const hub = WakeHub.for(base);
    const stop = hub.listen(channel, 'me', () => heard.push('woken'));
    const publisher = redis.client();
    await pollUntil('subscribed', async () => hub.hears(channel) && (await publisher.publish(channel, 'other')) === 1);
    await pollUntil('the first wake-up heard', async () => heard.length === 1);

    await publisher.call('CLIENT', 'KILL', 'TYPE', 'pubsub');
    await pollUntil('the reconnect told the listener', async () => heard.length === 2);
    await pollUntil('subscribed again', async () => hub.hears(channel) && (await publisher.publish(channel, 'other')) === 1);
    await pollUntil('a wake-up after the reconnect heard', async () => heard.length === 3);
    // Its own wake-ups, and those for other members, are not for it.
    await publisher.publish(channel, 'me');
    await publisher.publish(channel, 'other someone-else');
    await publisher.publish(channel, 'other someone-else me');
    await pollUntil('the wake-up naming it heard', async () => heard.length === 4);
    await stop();
  });
});

describe('a listener that comes while the last one just left', () => {
  it("is subscribed on the hub's new connection, though the closed one's SUBSCRIBE was still under way", async () => {
    const hub = WakeHub.for(redis.client());
    const first = uniqueName('wake-first');
    const second = uniqueName('wake-second');
    const stopFirst = hub.listen(first, 'a', () => undefined);
    // The last listener leaves before its SUBSCRIBE came back: the connection closes under it.
    await stopFirst();
    let woken = 0;
    const stop = hub.listen(second, 'b', () => (woken += 1));
    await pollUntil('the second channel subscribed', async () => hub.hears(second));
    await redis.client().publish(second, 'someone');
    await pollUntil('its wake-up heard', async () => woken === 1);
    await stop();
  });
});

describe('a wake-up subscriber that stops answering without closing', () => {
  it('is found by its keep-alive PING, reset, reported while it lasts, and subscribes again', async () => {
    const proxy = await TcpProxy.start(redis.server.port);
    try {
      const base = redis.clientAt(proxy.url);
      const hub = WakeHub.for(base);
      const channel = uniqueName('wake-stuck');
      const heard: string[] = [];
      const stuck: string[] = [];
      const stop = hub.listen(
        channel,
        'me',
        () => heard.push('woken'),
        (message) => stuck.push(message),
      );
      const publisher = redis.client();
      await pollUntil('subscribed', async () => hub.hears(channel) && (await publisher.publish(channel, 'first')) === 1);

      proxy.blackholeOpenConnections();
      // The next keep-alive PING (every 5 s) gets no answer within 2 s.
      await pollUntil('the stuck subscriber reported', async () => stuck.length > 0 && hub.problem() !== undefined, { timeoutMs: 10_000 });
      expect(stuck[0]).toMatch(
        /the wake-up subscriber's PING did not come back within 2000 ms; the wake-up subscriber connection was reset/,
      );
      expect(hub.hears(channel)).toBe(false); // its members heartbeat at the short interval meanwhile
      const before = heard.length;
      await pollUntil('the reconnect told the listener', async () => heard.length > before);
      await pollUntil('subscribed again', async () => (await publisher.publish(channel, 'second')) === 1);
      await pollUntil('a wake-up after the reset heard', async () => heard.length > before + 1);
      await pollUntil('the problem gone with the next answered PING', async () => hub.problem() === undefined, { timeoutMs: 10_000 });
      expect(hub.hears(channel)).toBe(true);
      await stop();
    } finally {
      await proxy.stop();
    }
  });
});

describe('a wake-up SUBSCRIBE that never answers', () => {
  it('times out, resets the subscriber, is reported while it lasts, and is sent again until answered; then the listener is woken', async () => {
    const proxy = await TcpProxy.start(redis.server.port);
    try {
      const held = proxy.holdNextRequest(TcpProxy.command('SUBSCRIBE'));
      const hub = WakeHub.for(redis.clientAt(proxy.url));
      const channel = uniqueName('wake-subscribe');
      let woken = 0;
      const stuck: { message: string; problem: string | undefined; hears: boolean }[] = [];
      const stop = hub.listen(
        channel,
        'me',
        () => (woken += 1),
        (message) => stuck.push({ message, problem: hub.problem(), hears: hub.hears(channel) }),
      );
      await held.arrived;
      expect(hub.hears(channel)).toBe(false);
      await pollUntil('the SUBSCRIBE given up', async () => stuck.length > 0, { timeoutMs: 5000 });
      expect(stuck[0].message).toMatch(
        /the wake-up SUBSCRIBE did not come back within 2000 ms; the wake-up subscriber connection was reset/,
      );
      expect(stuck[0].problem).toMatch(/the wake-up subscriber could not subscribe/);
      expect(stuck[0].hears).toBe(false);
      // The held request went with its connection; the next SUBSCRIBE, on the new one, is answered.
      await pollUntil('subscribed again', async () => hub.hears(channel), { timeoutMs: 5000 });
      expect(hub.problem()).toBeUndefined();
      expect(woken).toBe(1); // what was published meanwhile is lost: it is woken once to look
      await redis.client().publish(channel, 'other');
      await pollUntil('a wake-up heard', async () => woken === 2);
      await stop();
      held.release();
    } finally {
      await proxy.stop();
    }
  });
});

describe('stopping while Redis does not answer', () => {
  it('stop() returns while Redis does not answer: neither an UNSUBSCRIBE nor a call its read loop waits on holds it up', async () => {
    const proxy = await TcpProxy.start(redis.server.port);
    try {
      const client = redis.clientAt(proxy.url);
      const streamPrefix = uniqueName('wake-stop');
      // Two groups: two wake channels on the client's one subscriber connection.
      const members = ['a', 'b'].map(
        (memberId) =>
          new CoordinatedMember(client, {
            streamPrefix,
            consumerGroup: `group-${memberId}`,
            memberId,
            shardCount: 2,
            sessionTimeoutMs: 1500,
            handler: () => undefined,
          }),
      );
      for (const member of members) member.on('error', () => undefined);
      await Promise.all(members.map((m) => m.start()));

      proxy.freeze(); // every request from now on waits: nothing is answered, nothing fails
      // The leave is bounded by a third of the session timeout; before the fix the first member's
      // stop() then waited on its UNSUBSCRIBE (its channel emptied, the other still listened) for
      // as long as Redis did not answer.
      let stopped = false;
      void members[0].stop().then(() => (stopped = true));
      await pollUntil('the first member stopped', async () => stopped, { timeoutMs: 10_000 });
      // The last one: its read loop waits on a command that is never answered; stop() gives up on
      // it after the block time plus the read grace (docs/runtime.md) instead of waiting forever.
      let lastStopped = false;
      void members[1].stop().then(() => (lastStopped = true));
      await pollUntil('the last member stopped', async () => lastStopped, { timeoutMs: 15_000 });
    } finally {
      await proxy.stop();
    }
  });
});
