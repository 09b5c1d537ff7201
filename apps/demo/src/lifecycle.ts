import type { INestApplication, Logger } from '@nestjs/common';
import type { RedisServer } from '@redis-stream-coordinator/core/testing';
import { CoordinatorConnections, CoordinatorRegistry } from '@redis-stream-coordinator/nestjs';

/** How often the demo looks whether the redis-server it started is still there. */
const REDIS_WATCH_INTERVAL_MS = 250;

/**
 * A signal that comes again within this time of the first is one signal delivered twice, not a
 * request to stop at once: `npm run demo` gets a process group's SIGTERM (from `timeout`, a process
 * manager) or a terminal's SIGINT too and passes it on to node, which had it from the group already,
 * milliseconds before. Someone who means "now" sends it again later, or sends SIGKILL.
 */
const REPEATED_SIGNAL_MS = 1000;

/**
 * How the demo ends, as a whole and never half:
 * - SIGINT or SIGTERM: the members drain and leave their groups, the application closes, then the
 *   private redis-server stops; exit code 0. A second signal stops everything at once (exit 130),
 *   unless it is the same signal within REPEATED_SIGNAL_MS (the copy npm passes on).
 * - The private redis-server dies under it (killed, crashed, or signalled with the whole process
 *   group, as Ctrl+C in a terminal or a process manager does): nothing is left to leave or to
 *   reconnect to, so the members are aborted and the connections cut, the application closes and
 *   the process exits with code 1 and one error line, instead of reconnecting forever.
 * - Either way a shutdown that has not finished after `shutdownTimeoutMs` exits with code 1.
 * With REDIS_URL (someone else's Redis) only the signals apply: an outage there is waited out.
 */
export class DemoLifecycle {
  private shuttingDown = false;
  /** The signal that started the shutdown, and when. */
  private firstSignal: { signal: NodeJS.Signals; at: number } | undefined;
  private redisGone = false;
  private watcher: NodeJS.Timeout | undefined;

  constructor(
    private readonly app: INestApplication,
    private readonly privateServer: RedisServer | undefined,
    private readonly logger: Logger,
    private readonly shutdownTimeoutMs: number,
  ) {}

  watch(): void {
    for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => this.onSignal(signal));
    const pid = this.privateServer?.pid;
    if (pid === undefined) return;
    this.watcher = setInterval(() => {
      if (!isAlive(pid)) this.onRedisGone(pid);
    }, REDIS_WATCH_INTERVAL_MS);
  }

  private onSignal(signal: NodeJS.Signals): void {
    const first = this.firstSignal;
    if (first?.signal === signal && Date.now() - first.at < REPEATED_SIGNAL_MS) return;
    if (this.shuttingDown) {
      this.logger.warn(`${signal} again: stopping at once`);
      this.killRedis();
      process.exit(130);
    }
    this.firstSignal = { signal, at: Date.now() };
    void this.shutdown(`${signal}: members drain and leave their groups`, 0);
  }

  private onRedisGone(pid: number): void {
    if (this.redisGone) return;
    this.redisGone = true;
    clearInterval(this.watcher);
    // Leaving needs Redis: abort the members (no drain, no leave) and cut the connections, which
    // fails every command still waiting, so a close already under way finishes too.
    for (const member of this.app.get(CoordinatorRegistry).members()) member.abort();
    for (const connection of this.app.get(CoordinatorConnections).all()) connection.client.disconnect();
    if (this.shuttingDown) return;
    this.logger.error(`the private redis-server (pid ${pid}) exited: the demo stops too`);
    void this.shutdown('closing without Redis', 1);
  }

  private async shutdown(reason: string, exitCode: number): Promise<void> {
    this.shuttingDown = true;
    this.logger.log(reason);
    const deadline = setTimeout(() => {
      this.logger.error(`the shutdown did not finish within ${this.shutdownTimeoutMs} ms: exiting anyway`);
      this.killRedis();
      process.exit(1);
    }, this.shutdownTimeoutMs);
    let code = exitCode;
    try {
      await this.app.close();
    } catch (error) {
      this.logger.error(`closing the application failed: ${(error as Error).message}`);
      code = 1;
    }
    clearInterval(this.watcher);
    await this.privateServer?.stop();
    clearTimeout(deadline);
    process.exit(code);
  }

  private killRedis(): void {
    const pid = this.privateServer?.pid;
    if (pid !== undefined && isAlive(pid)) process.kill(pid, 'SIGKILL');
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
