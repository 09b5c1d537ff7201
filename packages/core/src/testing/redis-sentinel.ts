import { onAnyNode, onNode, waitUntil } from './node-admin';
import { RedisServer } from './redis-server';

export interface RedisSentinelOptions {
  /** The name the Sentinels monitor the master under. Default 'rsc-master'. */
  masterName?: string;
  /** Replicas of the master. Default 1. */
  replicas?: number;
  /** Sentinels (quorum: a majority). Default 3. */
  sentinels?: number;
  /** `down-after-milliseconds`: how long the master may be unreachable before a failover. Default 1000 ms. */
  downAfterMs?: number;
}

/**
 * A private Sentinel setup on free loopback ports (by default one master, one replica and three
 * Sentinels), for tests and benchmarks. `stop()` stops exactly the processes it started and removes
 * their directories. `failover()` kills the master and waits until the Sentinels have promoted a
 * replica; `switchMaster()` moves the master while the old one stays up, its clients connected.
 *
 * @example
 * const setup = await RedisSentinel.start();
 * const client = new Redis({ sentinels: setup.sentinelNodes, name: setup.masterName });
 */
export class RedisSentinel {
  private constructor(
    readonly masterName: string,
    readonly servers: RedisServer[],
    readonly sentinels: RedisServer[],
    /** `SENTINEL SET` arguments of the master's settings (down-after, failover-timeout, parallel-syncs), and the quorum. */
    private readonly monitoring: { quorum: number; settings: string[] },
  ) {}

  static async start(options: RedisSentinelOptions = {}): Promise<RedisSentinel> {
    const masterName = options.masterName ?? 'rsc-master';
    if (!/^[A-Za-z0-9_.-]{1,64}$/.test(masterName))
      throw new RangeError(`masterName must be 1-64 letters, digits, '_', '.' or '-', got ${JSON.stringify(masterName)}`);
    const replicaCount = options.replicas ?? 1;
    const sentinelCount = options.sentinels ?? 3;
    const downAfter = options.downAfterMs ?? 1000;
    const servers: RedisServer[] = [];
    const sentinels: RedisServer[] = [];
    const quorum = Math.floor(sentinelCount / 2) + 1;
    const settings = [
      'down-after-milliseconds',
      String(downAfter),
      'failover-timeout',
      String(Math.max(3000, downAfter * 3)),
      'parallel-syncs',
      '1',
    ];
    const setup = new RedisSentinel(masterName, servers, sentinels, { quorum, settings });
    try {
      const master = await RedisServer.start({ args: ['--repl-diskless-sync-delay', '0'] });
      servers.push(master);
      for (let i = 0; i < replicaCount; i++) {
        servers.push(
          await RedisServer.start({ args: ['--replicaof', '127.0.0.1', String(master.port), '--repl-diskless-sync-delay', '0'] }),
        );
      }
      const config = [
        `sentinel monitor ${masterName} 127.0.0.1 ${master.port} ${quorum}`,
        ...Array.from({ length: settings.length / 2 }, (_, i) => `sentinel ${settings[2 * i]} ${masterName} ${settings[2 * i + 1]}`),
        '',
      ].join('\n');
      for (let i = 0; i < sentinelCount; i++) sentinels.push(await RedisServer.start({ config, sentinel: true }));
      await waitUntil(
        async () => (await setup.replicasSeen()) >= replicaCount,
        `the Sentinels to see ${replicaCount} replica(s) of ${masterName}`,
      );
    } catch (error) {
      await setup.stop();
      throw error;
    }
    return setup;
  }

  /** For ioredis: `new Redis({ sentinels: setup.sentinelNodes, name: setup.masterName })`. */
  get sentinelNodes(): { host: string; port: number }[] {
    return this.sentinels.map((s) => ({ host: '127.0.0.1', port: s.port }));
  }

  /** The port of the master as the Sentinels see it now. */
  async masterPort(): Promise<number> {
    const running = this.sentinels.filter((s) => s.isRunning()).map((s) => s.port);
    const [, port] = (await onAnyNode(running, (c) => c.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', this.masterName))) as [string, string];
    return Number(port);
  }

  /**
   * Kills (SIGKILL) the current master and waits until the Sentinels have promoted another server
   * and it answers as a master. Returns the killed master's port.
   */
  async failover(): Promise<number> {
    const old = await this.masterPort();
    const server = this.servers.find((s) => s.port === old);
    if (!server) throw new Error(`the master (port ${old}) is not a server of this setup`);
    await server.kill('SIGKILL');
    await waitUntil(async () => {
      const port = await this.masterPort();
      return port !== old && /role:master/.test(await onNode(port, (c) => c.info('replication')));
    }, `a replica to be promoted after the master on port ${old} was killed`);
    return old;
  }

  /**
   * Starts a killed server again (empty: no persistence) as a replica of the current master, and
   * waits until it has synced (the Sentinels learn of it from the master within seconds).
   */
  async restartServer(port: number): Promise<void> {
    const server = this.servers.find((s) => s.port === port);
    if (!server) throw new Error(`no server of this setup listens on port ${port}`);
    await server.restart();
    // What the Sentinels would do some seconds later (they convert a returning old master): now,
    // as they do it. A Sentinel closes the clients of a server it reconfigures (CLIENT KILL TYPE
    // normal and pubsub after SLAVEOF), so that they ask for the master again: Redis itself keeps
    // them on REPLICAOF, and a client that connected to the returning master before this (one
    // Sentinel that has not yet learnt of the failover names it) would have every write refused
    // READONLY (reported from flaky runs of the failover test: a member's heartbeats, for ~16 s).
    // A demotion that closes nothing is `switchMaster()`.
    const master = await this.masterPort();
    await onNode(port, async (c) => {
      await c.call('REPLICAOF', '127.0.0.1', String(master));
      await c.call('CLIENT', 'KILL', 'TYPE', 'normal');
      await c.call('CLIENT', 'KILL', 'TYPE', 'pubsub');
    });
    await waitUntil(
      async () => /master_link_status:up/.test(await onNode(port, (c) => c.info('replication'))),
      `the restarted server on port ${port} to replicate the current master`,
    );
  }

  /**
   * Moves the master to a replica while the old master stays up, demoted by `REPLICAOF`, and points
   * the Sentinels at the new one (`SENTINEL REMOVE`, then `MONITOR`): as an operator, or a managed
   * service, moves a master without a Sentinel failover. Unlike Sentinel's own reconfiguration
   * (which sends `CLIENT KILL TYPE normal` to a server it reconfigures), nothing closes the old
   * master's clients: Redis 7 closes only blocked ones on `REPLICAOF`, so a client connected to it
   * stays there and has every write refused READONLY until it reconnects. Waits until every Sentinel
   * names the new master and the old one replicates it. Returns both ports.
   */
  async switchMaster(): Promise<{ from: number; to: number }> {
    const from = await this.masterPort();
    const to = this.servers.find((s) => s.port !== from && s.isRunning())?.port;
    if (to === undefined) throw new Error(`no running replica of the master on port ${from} to switch to`);
    // Replication is asynchronous: a write the old master took that has not reached the new one
    // yet would be dropped when the old master resyncs from it (a stream created just before went
    // missing on the new master, 1 run in ~10). So writes wait (CLIENT PAUSE WRITE: clients that
    // write are held, the others go on) until every replica acknowledged everything (WAIT), as a
    // managed switch does; the held writes then meet a replica (READONLY), as in real life.
    const replicas = this.servers.filter((s) => s.port !== from && s.isRunning()).length;
    await onNode(from, async (c) => {
      await c.call('CLIENT', 'PAUSE', '10000', 'WRITE');
      const acknowledged = Number(await c.call('WAIT', String(replicas), '5000'));
      if (acknowledged < replicas) {
        await c.call('CLIENT', 'UNPAUSE');
        throw new Error(`switchMaster: ${acknowledged} of ${replicas} replica(s) of the master on port ${from} caught up within 5 s`);
      }
    });
    // The old master first: for a moment both are replicas (of each other) and refuse writes, but
    // never are two masters taking writes that one of them would then drop.
    await onNode(from, async (c) => {
      await c.call('REPLICAOF', '127.0.0.1', String(to));
      await c.call('CLIENT', 'UNPAUSE');
    });
    await onNode(to, (c) => c.call('REPLICAOF', 'NO', 'ONE'));
    const sentinels = this.sentinels.filter((s) => s.isRunning());
    for (const sentinel of sentinels) {
      await onNode(sentinel.port, async (c) => {
        await c.call('SENTINEL', 'REMOVE', this.masterName);
        await c.call('SENTINEL', 'MONITOR', this.masterName, '127.0.0.1', String(to), String(this.monitoring.quorum));
        await c.call('SENTINEL', 'SET', this.masterName, ...this.monitoring.settings);
      });
    }
    await waitUntil(async () => {
      const named = (await Promise.all(
        sentinels.map((s) => onNode(s.port, (c) => c.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', this.masterName))),
      )) as [string, string][];
      return (
        named.every(([, port]) => Number(port) === to) && /master_link_status:up/.test(await onNode(from, (c) => c.info('replication')))
      );
    }, `the Sentinels to name the master on port ${to} and the server on port ${from} to replicate it`);
    return { from, to };
  }

  async stop(): Promise<void> {
    await Promise.all([...this.sentinels, ...this.servers].map((s) => s.stop()));
  }

  private async replicasSeen(): Promise<number> {
    const counts = await Promise.all(
      this.sentinels.map((s) =>
        onNode(s.port, async (client) => {
          const replicas = (await client.call('SENTINEL', 'REPLICAS', this.masterName)) as string[][];
          return replicas.filter((fields) => !String(fields[fields.indexOf('flags') + 1]).includes('down')).length;
        }),
      ),
    );
    return Math.min(...counts);
  }
}
