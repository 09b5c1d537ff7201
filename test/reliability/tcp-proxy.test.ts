import { describe, expect, it } from 'vitest';
import { pollUntil } from '../support/poll';
import { proxyFactory } from '../support/proxy-fixture';
import { TcpProxy } from '../support/tcp-proxy';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const aProxy = proxyFactory(redis);

/** A client that reports a lost connection as a failed command instead of resending it. */
function strictClientOf(proxy: TcpProxy) {
  return redis.clientAt(proxy.url, { maxRetriesPerRequest: 0, autoResendUnfulfilledCommands: false, retryStrategy: () => null });
}

describe('the fault proxy', () => {
  it('delays replies only: the command runs at once, its answer waits until the delay is lifted', async () => {
    const proxy = await aProxy();
    const client = redis.clientAt(proxy.url);
    await client.ping();
    const key = uniqueName('delayed');
    proxy.delay('reply', 60_000);
    let answered = false;
    const reply = client.set(key, 'v').then((r) => {
      answered = true;
      return r;
    });
    await pollUntil('the write to land', async () => (await redis.client().get(key)) === 'v');
    expect(answered).toBe(false);
    proxy.delay('reply', 0);
    expect(await reply).toBe('OK');
  });

  it('delays requests: nothing reaches Redis until the delay is lifted, then in order', async () => {
    const proxy = await aProxy();
    const client = redis.clientAt(proxy.url);
    await client.ping();
    const key = uniqueName('late-request');
    proxy.delay('request', 60_000, 10);
    const replies = Promise.all([client.rpush(key, 'a'), client.rpush(key, 'b'), client.rpush(key, 'c')]);
    expect(await redis.client().exists(key)).toBe(0);
    proxy.delay('request', 0);
    expect(await replies).toEqual([1, 2, 3]);
    expect(await redis.client().lrange(key, 0, -1)).toEqual(['a', 'b', 'c']);
  });

  it('silences the one connection that carries a matching request (half-open): no answer, no close; the other connections go on', async () => {
    const proxy = await aProxy();
    const silenced = redis.clientAt(proxy.url);
    const other = redis.clientAt(proxy.url);
    await Promise.all([silenced.ping(), other.ping()]);
    const key = uniqueName('half-open');
    const done = proxy.blackholeConnectionOf(TcpProxy.command('SET', key));
    let answered = false;
    void silenced.set(key, 'v').then(
      () => (answered = true),
      () => (answered = true),
    );
    await done;
    // The other connection answers; the silenced one neither answers nor closes, and its request never ran.
    expect(await other.ping()).toBe('PONG');
    void silenced.ping().then(
      () => (answered = true),
      () => (answered = true),
    );
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(answered).toBe(false);
    expect(silenced.status).toBe('ready');
    expect(proxy.connections).toBe(2);
    expect(await redis.client().exists(key)).toBe(0);
    silenced.disconnect();
  });

  it('stalls one connection for a while (no answer, no close), then it recovers and what waited on it is answered in order', async () => {
    const proxy = await aProxy();
    const stalled = redis.clientAt(proxy.url);
    const other = redis.clientAt(proxy.url);
    await Promise.all([stalled.ping(), other.ping()]);
    const key = uniqueName('stalled');
    const stall = proxy.stallConnectionOf(TcpProxy.command('RPUSH', key));
    let answered = false;
    const replies = Promise.all([stalled.rpush(key, 'a'), stalled.rpush(key, 'b')]).then((r) => {
      answered = true;
      return r;
    });
    await stall.stalled;
    expect(await other.ping()).toBe('PONG');
    await pollUntil('other traffic to pass the stall', async () => (await other.incr(`${key}:n`)) >= 5);
    expect(answered).toBe(false);
    expect(stalled.status).toBe('ready');
    expect(await redis.client().exists(key)).toBe(0);
    stall.recover();
    expect(await replies).toEqual([1, 2]);
    expect(await redis.client().lrange(key, 0, -1)).toEqual(['a', 'b']);
  });

  it('stalls the open connections that already carried a command (a subscriber that subscribed earlier), not the others', async () => {
    const proxy = await aProxy();
    const subscriber = redis.clientAt(proxy.url);
    const other = redis.clientAt(proxy.url);
    const channel = uniqueName('channel');
    await subscriber.subscribe(channel);
    await other.ping();
    const heard: string[] = [];
    subscriber.on('message', (_channel: string, message: string) => heard.push(message));
    const stall = proxy.stallConnectionOf({ carried: 'SUBSCRIBE' });
    await stall.stalled;
    await other.publish(channel, 'during');
    let ponged = false;
    void subscriber.ping().then(() => (ponged = true));
    expect(await other.ping()).toBe('PONG');
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect([heard, ponged]).toEqual([[], false]);
    stall.recover();
    await pollUntil('the message and the PING answer after recovery', async () => heard.length === 1 && ponged);
    expect(heard).toEqual(['during']);
  });

  it('lets a watcher see every request that goes on to Redis, not one a half-open connection swallowed', async () => {
    const proxy = await aProxy();
    const seen: string[] = [];
    proxy.watchRequests((request) => seen.push(request));
    const client = redis.clientAt(proxy.url);
    const key = uniqueName('watched');
    await client.set(key, 'v');
    expect(seen.some((r) => TcpProxy.command('SET', key)(r))).toBe(true);
    const silenced = proxy.blackholeConnectionOf(TcpProxy.command('GET'));
    void client.get(key).catch(() => undefined);
    await silenced;
    expect(seen.some((r) => TcpProxy.command('GET')(r))).toBe(false);
    client.disconnect();
  });

  it('delays matching requests only (and what follows them on their connection); other connections go at once', async () => {
    const proxy = await aProxy();
    const slow = redis.clientAt(proxy.url);
    const other = redis.clientAt(proxy.url);
    await Promise.all([slow.ping(), other.ping()]);
    const key = uniqueName('matched');
    proxy.delayMatching(TcpProxy.command('RPUSH', key), 60_000);
    const replies = Promise.all([slow.rpush(key, 'a'), slow.rpush(key, 'b')]);
    expect(await other.set(uniqueName('unmatched'), 'x')).toBe('OK');
    expect(await redis.client().exists(key)).toBe(0);
    proxy.clearFaults();
    expect(await replies).toEqual([1, 2]);
  });

  it('drops exactly the reply of a matching command after it ran; other connections carry on', async () => {
    const proxy = await aProxy();
    const client = strictClientOf(proxy);
    const other = redis.clientAt(proxy.url);
    await Promise.all([client.ping(), other.ping()]);
    const key = uniqueName('dropped');
    await client.set(`${key}:before`, '1'); // not matched: its reply arrives
    const dropped = proxy.dropNextReply(TcpProxy.command('INCR', key));
    await expect(client.incr(key)).rejects.toThrow();
    await dropped;
    expect(await redis.client().get(key)).toBe('1'); // it ran
    expect(await other.ping()).toBe('PONG');
  });

  it('freeze holds both directions without loss; thaw delivers; cut closes every connection', async () => {
    const proxy = await aProxy();
    const client = redis.clientAt(proxy.url);
    await client.ping();
    const key = uniqueName('frozen');
    proxy.freeze();
    const reply = client.set(key, 'v');
    expect(await redis.client().exists(key)).toBe(0);
    proxy.thaw();
    expect(await reply).toBe('OK');
    expect(proxy.connections).toBe(1);
    proxy.cut();
    expect(proxy.connections).toBe(0);
  });
});
