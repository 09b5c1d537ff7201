import { Redis, type RedisOptions } from 'ioredis';
import { afterAll, beforeAll } from 'vitest';
import { RedisServer, type RedisServerOptions } from '@redis-stream-coordinator/core/testing';

export interface RedisFixture {
  server: RedisServer;
  /** A client of the server, disconnected after the file. */
  client(options?: RedisOptions): Redis;
  /** A client of another address (e.g. a proxy in front of the server), disconnected after the file. */
  clientAt(url: string, options?: RedisOptions): Redis;
}

/**
 * Starts a private redis-server for the calling test file and stops it (and every client made here)
 * after the file, pass or fail.
 */
export function useRedisServer(options: RedisServerOptions = {}): RedisFixture {
  const clients = new Set<Redis>();
  const fixture: RedisFixture = {
    server: undefined as unknown as RedisServer,
    client(clientOptions = {}) {
      return fixture.clientAt(fixture.server.url, clientOptions);
    },
    clientAt(url, clientOptions = {}) {
      const client = new Redis(url, { maxRetriesPerRequest: 3, ...clientOptions });
      // Tests that restart or stop Redis check behaviour, not ioredis' reconnect chatter.
      client.on('error', () => undefined);
      clients.add(client);
      return client;
    },
  };
  beforeAll(async () => {
    fixture.server = await RedisServer.start(options);
  });
  afterAll(async () => {
    for (const client of clients) client.disconnect();
    await fixture.server?.stop();
  });
  return fixture;
}

let counter = 0;

/** A name no other test of this process uses, so tests sharing a server never collide. */
export function uniqueName(label: string): string {
  counter += 1;
  return `${label}-${process.pid}-${counter}`;
}
