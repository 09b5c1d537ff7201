import { afterEach } from 'vitest';
import { TcpProxy } from './tcp-proxy';
import type { RedisFixture } from './vitest-redis';

/**
 * `aProxy()` for a test file: a TcpProxy in front of the file's redis-server, stopped after its test.
 * Hooks run in reverse order of registration: call this after `memberFactory`, and the proxies stop
 * before the members do (a test that needs its members to leave through the proxy stops them itself).
 */
export function proxyFactory(redis: RedisFixture): () => Promise<TcpProxy> {
  const proxies: TcpProxy[] = [];
  afterEach(async () => {
    await Promise.all(proxies.splice(0).map((p) => p.stop()));
  });
  return async () => {
    const proxy = await TcpProxy.start(redis.server.port);
    proxies.push(proxy);
    return proxy;
  };
}
