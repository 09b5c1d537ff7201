import { Redis, type RedisOptions } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { isReadonlyError, reconnectOnReadonly } from './readonly-reconnect';
import { duplicateClient } from './slot-pipelines';

describe('reconnecting on READONLY', () => {
  it('knows Redis refusing a write on a replica, from a command or from a script', () => {
    expect(reconnectOnReadonly(new Error("READONLY You can't write against a read only replica."))).toBe(1);
    expect(isReadonlyError(new Error("READONLY You can't write against a read only replica. script: 86fa, on @user_script:1."))).toBe(true);
    expect(reconnectOnReadonly(new Error('ERR unknown command'))).toBe(false);
    expect(isReadonlyError(new Error('LOADING Redis is loading the dataset in memory'))).toBe(false);
  });

  it("the library's own connections reconnect on READONLY unless the application's client says otherwise", () => {
    const clients: Redis[] = [];
    const lazy = (options: RedisOptions) => {
      const client = new Redis({ lazyConnect: true, ...options });
      clients.push(client);
      return client;
    };
    try {
      // A Sentinel client duplicated for a reader or an ack connection: without it, left on a
      // demoted master, every write of that connection is refused for as long as it lives.
      const bare = lazy({ sentinels: [{ host: '127.0.0.1', port: 1 }], name: 'm' });
      const duplicate = duplicateClient(bare) as Redis;
      clients.push(duplicate);
      expect(duplicate.options.reconnectOnError).toBe(reconnectOnReadonly);
      expect(bare.options.reconnectOnError ?? null).toBeNull();

      const own = () => 2 as const;
      const configured = duplicateClient(lazy({ reconnectOnError: own })) as Redis;
      clients.push(configured);
      expect(configured.options.reconnectOnError).toBe(own);
    } finally {
      for (const client of clients) client.disconnect();
    }
  });
});
