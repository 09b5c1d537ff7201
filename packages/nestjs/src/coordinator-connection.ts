import { Redis } from 'ioredis';
import type { CoordinatorModuleOptions } from './coordinator-module-options';

/** The module's Redis client, and whether the module created it (then it also closes it). */
export class CoordinatorConnection {
  private constructor(
    readonly client: Redis,
    readonly owned: boolean,
  ) {}

  static fromOptions(options: CoordinatorModuleOptions, onError: (error: Error) => void): CoordinatorConnection {
    const redis = options?.redis;
    if (!redis || typeof redis !== 'object' || (!redis.url && !redis.options && !redis.client)) {
      throw new Error('CoordinatorModule: the "redis" option is required: give redis.url, redis.options or redis.client');
    }
    if (redis.client) return new CoordinatorConnection(redis.client, false);
    if (redis.url !== undefined && typeof redis.url !== 'string') {
      throw new TypeError(`CoordinatorModule: redis.url must be a string, got ${typeof redis.url}`);
    }
    const client = redis.url ? new Redis(redis.url, redis.options ?? {}) : new Redis(redis.options ?? {});
    client.on('error', onError); // ioredis reconnects by itself; the error is logged, never thrown
    return new CoordinatorConnection(client, true);
  }

  async close(): Promise<void> {
    if (!this.owned) return;
    // QUIT would wait in the offline queue while Redis is unreachable: then just drop the socket.
    if (this.client.status !== 'ready') {
      this.client.disconnect();
      return;
    }
    await Promise.race([this.client.quit(), new Promise((resolve) => setTimeout(resolve, 2000))]).catch(() => undefined);
    this.client.disconnect();
  }
}
