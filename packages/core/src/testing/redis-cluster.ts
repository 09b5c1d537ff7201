import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import type { Redis } from 'ioredis';
import { checkOption } from '../protocol/option-ranges';
import { onAnyNode, onNode, waitUntil } from './node-admin';
import { RedisServer } from './redis-server';

const run = promisify(execFile);

export interface RedisClusterOptions {
  /** Masters (each with `replicasPerMaster` replicas), 3 to 9. Default 3. */
  masters?: number;
  /** 0 to 2. Default 1. */
  replicasPerMaster?: number;
  /**
   * `cluster-node-timeout`: how long a master may be unreachable before its replica takes over.
   * Default 1000 ms (fast failovers for tests; Redis' own default is 15 s); at most a day.
   */
  nodeTimeoutMs?: number;
  /** Extra `redis-server` arguments for every node. */
  args?: string[];
}

export interface ClusterNodeInfo {
  id: string;
  port: number;
  role: 'master' | 'replica';
  /** The master's id, for a replica. */
  masterId: string | undefined;
  /** Slot ranges served, for a master: [[first, last], ...]. */
  slots: [number, number][];
  failed: boolean;
}

/** The sizes and the node timeout of a cluster to start, each checked against its row of OPTION_RANGES. */
export function resolveClusterOptions(options: RedisClusterOptions): { masters: number; replicas: number; nodeTimeoutMs: number } {
  return {
    masters: checkOption('testing.cluster.masters', options.masters ?? 3),
    replicas: checkOption('testing.cluster.replicasPerMaster', options.replicasPerMaster ?? 1),
    nodeTimeoutMs: checkOption('testing.cluster.nodeTimeoutMs', options.nodeTimeoutMs ?? 1000),
  };
}

/**
 * A private Redis Cluster on free loopback ports (by default 3 masters and 3 replicas, made with
 * `redis-cli --cluster create`), for tests and benchmarks. `stop()` stops exactly the processes it
 * started and removes their directories. Helpers kill a master (its replica takes over), and move a
 * slot to another master the way `redis-cli --cluster reshard` does (MIGRATING/IMPORTING, so
 * clients see ASK and then MOVED).
 *
 * @example
 * const cluster = await RedisCluster.start();
 * const client = new Cluster(cluster.startupNodes);
 * // ...
 * await cluster.stop();
 */
export class RedisCluster {
  private constructor(readonly servers: RedisServer[]) {}

  static async start(options: RedisClusterOptions = {}): Promise<RedisCluster> {
    const { masters, replicas, nodeTimeoutMs } = resolveClusterOptions(options);
    const args = [
      '--cluster-enabled',
      'yes',
      '--cluster-node-timeout',
      String(nodeTimeoutMs),
      // Slots of a failed master must not stop the others from being served.
      '--cluster-require-full-coverage',
      'no',
      // A replica that never synced cannot take over; Redis 7 waits 5 s before a diskless sync by default.
      '--repl-diskless-sync-delay',
      '0',
      ...(options.args ?? []),
    ];
    const started = await Promise.allSettled(Array.from({ length: masters * (1 + replicas) }, () => RedisServer.start({ args })));
    const servers = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
    const cluster = new RedisCluster(servers);
    try {
      const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
      if (failed) throw failed.reason;
      await run('redis-cli', [
        '--cluster',
        'create',
        ...servers.map((s) => `127.0.0.1:${s.port}`),
        '--cluster-replicas',
        String(replicas),
        '--cluster-yes',
      ]).catch((error: { stderr?: string; stdout?: string; message: string }) => {
        throw new Error(`redis-cli --cluster create failed (is redis-cli installed?): ${error.stderr || error.stdout || error.message}`);
      });
      await cluster.waitUntilReady();
    } catch (error) {
      await cluster.stop();
      throw error;
    }
    return cluster;
  }

  /** Addresses for `new Cluster(startupNodes)`: every node, so a client finds the cluster whichever is down. */
  get startupNodes(): { host: string; port: number }[] {
    return this.servers.map((s) => ({ host: '127.0.0.1', port: s.port }));
  }

  /** The same as `redis://` URLs (the CLI's `--cluster` list). */
  get urls(): string[] {
    return this.servers.map((s) => s.url);
  }

  /** The server listening on `port`. */
  server(port: number): RedisServer {
    const server = this.servers.find((s) => s.port === port);
    if (!server) throw new Error(`no node of this cluster listens on port ${port}`);
    return server;
  }

  /** `CLUSTER NODES` as seen from a live node. */
  async nodes(): Promise<ClusterNodeInfo[]> {
    return parseClusterNodes(String(await this.command((c) => c.cluster('NODES'))));
  }

  /** The live master serving `slot`. */
  async masterOf(slot: number): Promise<ClusterNodeInfo> {
    const master = (await this.nodes()).find((n) => n.role === 'master' && !n.failed && n.slots.some(([a, b]) => slot >= a && slot <= b));
    if (!master) throw new Error(`no live master serves slot ${slot}`);
    return master;
  }

  /** The hash slot of a key (CLUSTER KEYSLOT). */
  async slotOf(key: string): Promise<number> {
    return Number(await this.command((c) => c.cluster('KEYSLOT', key)));
  }

  /**
   * Kills (SIGKILL) the master serving `slot` and waits until one of its replicas has taken over
   * and every live node agrees (cluster_state:ok). Returns the port of the killed master, which
   * `restartNode` brings back (as a replica of the new master).
   */
  async failMaster(slot: number): Promise<number> {
    const master = await this.masterOf(slot);
    await this.server(master.port).kill('SIGKILL');
    await waitUntil(async () => {
      const now = await this.masterOf(slot).catch(() => undefined);
      return now !== undefined && now.port !== master.port;
    }, `a replica of port ${master.port} to take over slot ${slot}`);
    await this.waitUntilReady();
    return master.port;
  }

  /** Starts a killed node again (same port and directory: it rejoins with its nodes.conf). */
  async restartNode(port: number): Promise<void> {
    await this.server(port).restart();
    await this.waitUntilReady();
  }

  /**
   * Moves `slot` to the master listening on `toPort` as `redis-cli --cluster reshard` does: the
   * target IMPORTING, the source MIGRATING, keys moved `keysPerMigrate` at a time with MIGRATE (a
   * pause of `pauseMs` after each batch, so clients meet the slot half-moved and get ASK), then the
   * slot assigned to the target everywhere (clients get MOVED).
   */
  async migrateSlot(slot: number, toPort: number, options: { keysPerMigrate?: number; pauseMs?: number } = {}): Promise<void> {
    const source = await this.masterOf(slot);
    const nodes = await this.nodes();
    const target = nodes.find((n) => n.port === toPort && n.role === 'master' && !n.failed);
    if (!target) throw new Error(`port ${toPort} is not a live master of this cluster`);
    if (target.id === source.id) return;
    const batch = options.keysPerMigrate ?? 10;
    await onNode(target.port, (to) => to.cluster('SETSLOT', slot, 'IMPORTING', source.id));
    await onNode(source.port, async (from) => {
      await from.cluster('SETSLOT', slot, 'MIGRATING', target.id);
      for (;;) {
        const keys = (await from.cluster('GETKEYSINSLOT', slot, batch)) as string[];
        if (keys.length === 0) break;
        await from.migrate('127.0.0.1', target.port, '', 0, 5000, 'REPLACE', 'KEYS', ...keys);
        if (options.pauseMs) await new Promise((resolve) => setTimeout(resolve, options.pauseMs));
      }
    });
    // The target first (it bumps its config epoch), then the source, then every other master.
    await onNode(target.port, (to) => to.cluster('SETSLOT', slot, 'NODE', target.id));
    await onNode(source.port, (from) => from.cluster('SETSLOT', slot, 'NODE', target.id));
    for (const node of nodes) {
      if (node.role !== 'master' || node.failed || node.id === source.id || node.id === target.id) continue;
      await onNode(node.port, (other) => other.cluster('SETSLOT', slot, 'NODE', target.id));
    }
    await waitUntil(async () => (await this.masterOf(slot)).id === target.id, `slot ${slot} to be served by port ${toPort}`);
  }

  /** Stops every node (SIGTERM, SIGKILL after a grace period) and removes their directories. */
  async stop(): Promise<void> {
    await Promise.all(this.servers.map((s) => s.stop()));
  }

  /** Until every live node reports cluster_state:ok with all slots assigned, and agrees on the masters. */
  async waitUntilReady(): Promise<void> {
    await waitUntil(async () => {
      const live = this.servers.filter((s) => s.pid !== undefined && s.isRunning());
      const views = await Promise.all(
        live.map((s) =>
          onNode(s.port, async (client) => {
            const info = String(await client.cluster('INFO'));
            const nodes = parseClusterNodes(String(await client.cluster('NODES')));
            const masters = nodes
              .filter((n) => n.role === 'master' && !n.failed && n.slots.length > 0)
              .map((n) => `${n.id}:${JSON.stringify(n.slots)}`)
              .sort()
              .join(' ');
            // A replica must have synced: one that never did has no data to take over with.
            const replication = String(await client.info('replication'));
            const synced = !/role:slave/.test(replication) || /master_link_status:up/.test(replication);
            return synced && /cluster_state:ok/.test(info) && /cluster_slots_assigned:16384/.test(info) ? masters : undefined;
          }),
        ),
      );
      return views.every((v) => v !== undefined && v === views[0]);
    }, 'the cluster to be ready (cluster_state:ok on every live node, one view of the masters)');
  }

  private command<R>(call: (client: Redis) => Promise<R>): Promise<R> {
    return onAnyNode(
      this.servers.filter((s) => s.isRunning()).map((s) => s.port),
      call,
    );
  }
}

/** Parses CLUSTER NODES (`<id> <ip:port@cport> <flags> <master> ... <slot ranges>`). */
export function parseClusterNodes(text: string): ClusterNodeInfo[] {
  return text
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => {
      const [id, address, flags, master, , , , , ...slotFields] = line.trim().split(' ');
      const flagSet = new Set(flags.split(','));
      const slots = slotFields
        .filter((f) => !f.startsWith('['))
        .map((f): [number, number] => {
          const [a, b] = f.split('-').map(Number);
          return [a, b ?? a];
        });
      return {
        id,
        port: Number(address.split('@')[0].split(':').pop()),
        role: flagSet.has('master') ? 'master' : 'replica',
        masterId: master === '-' ? undefined : master,
        slots,
        failed: flagSet.has('fail') || flagSet.has('fail?') || flagSet.has('noaddr'),
      };
    });
}
