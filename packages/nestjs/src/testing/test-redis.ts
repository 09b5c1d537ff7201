import { RedisServer } from '@redis-stream-coordinator/core/testing';

/** The variable that points the tests at a Redis of your own instead of a private one. */
export const REDIS_URL_VARIABLE = 'REDIS_URL';

/**
 * The Redis a test file runs against: a private `redis-server` on a free loopback port (it needs
 * `redis-server` on the PATH), or the one `REDIS_URL` names when it is set (CI services, containers).
 * Start one per test file in your runner's before-all hook and stop it in its after-all hook: a
 * private server is stopped and its directory removed; a `REDIS_URL` one is left as it is, so give
 * each test its own stream names there.
 *
 * @example
 * let redis: TestRedis;
 * beforeAll(async () => { redis = await TestRedis.start(); });
 * afterAll(() => redis.stop());
 */
export class TestRedis {
  private constructor(
    /** The URL to give `CoordinatorModule.forRoot({ redis: { url } })`. */
    readonly url: string,
    /** The private server, when this file started one. */
    readonly server: RedisServer | undefined,
  ) {}

  /** A private `redis-server`, or `REDIS_URL` when set (`env` replaces `process.env`, for tests of this helper). */
  static async start(env: NodeJS.ProcessEnv = process.env): Promise<TestRedis> {
    const url = env[REDIS_URL_VARIABLE];
    if (url !== undefined && url !== '') {
      if (!/^rediss?:\/\//.test(url))
        throw new TypeError(`TestRedis: ${REDIS_URL_VARIABLE} must be a redis:// or rediss:// URL, got ${JSON.stringify(url)}`);
      return new TestRedis(url, undefined);
    }
    const server = await RedisServer.start();
    return new TestRedis(server.url, server);
  }

  /** Whether this file started its own server (false when `REDIS_URL` is used). */
  get isPrivate(): boolean {
    return this.server !== undefined;
  }

  /** Stops the private server (waits until it exited); a `REDIS_URL` server is not touched. */
  async stop(): Promise<void> {
    await this.server?.stop();
  }
}
