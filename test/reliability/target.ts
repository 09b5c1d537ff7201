/**
 * Where the reliability harness's Redis is (docs/reliability-cluster.md for the cluster): one redis-server with AOF, every member
 * process and the stale producer behind a TCP proxy of their own; or a private Redis Cluster (3
 * masters, 3 replicas), which members and producers reach by its startup nodes. A cluster announces
 * its own ports (MOVED, ASK, CLUSTER SLOTS), so no proxy can sit in front of it: the fault kinds that
 * need one run on the single node only (`FaultSpec.runsOn`).
 */
import { Cluster, type ClusterOptions, Redis, type RedisOptions } from 'ioredis';
import { LOADING_RETRY_MS, type RedisClient, type ReplicaWait } from '@redis-stream-coordinator/core';
import { RedisCluster, RedisServer } from '@redis-stream-coordinator/core/testing';
import type { MemberProcessSettings } from '../../packages/core/src/testing/member-process';
import { TcpProxy } from '../support/tcp-proxy';

export type TargetKind = 'single' | 'cluster';

/** Fast retries, and Redis still loading its AOF asked again every 200 ms (docs/reliability.md). */
const SINGLE_OPTIONS = { maxRetriesPerRequest: 1, retryStrategy: () => 50, maxLoadingRetryTime: LOADING_RETRY_MS };

/** docs/cluster.md's advice: retry through a failover or a half-moved slot instead of failing the call. */
const CLUSTER_OPTIONS: ClusterOptions = {
  retryDelayOnFailover: 100,
  retryDelayOnClusterDown: 100,
  retryDelayOnTryAgain: 50,
  maxRedirections: 64,
  redisOptions: { ...SINGLE_OPTIONS, maxRetriesPerRequest: 20 },
};

/**
 * On a cluster the producers wait for a replica (`waitForReplicas`) and members for their acks
 * (`ackWaitForReplicas`): a failover must then lose no send that resolved and undo no ack that
 * replicated (docs/cluster.md, "Durability"). 500 ms: a replica on this busy machine answers in a
 * few; a master whose replica is down (just failed over) fails such sends visibly meanwhile.
 */
export const CLUSTER_REPLICA_WAIT: ReplicaWait = { replicas: 1, timeoutMs: 500 };

export class ChaosTarget {
  /** Every proxy made here, stopped with the target (a fault that did not get to stop its own). */
  private readonly proxies = new Set<TcpProxy>();

  private constructor(
    readonly kind: TargetKind,
    private readonly single: RedisServer | undefined,
    private readonly redisCluster: RedisCluster | undefined,
    /** Sends and acks wait for a replica (cluster only; `RSC_CHAOS_NO_WAIT=1` turns it off to see what Redis loses). */
    readonly replicaWait: ReplicaWait | undefined,
  ) {}

  static async start(kind: TargetKind, options: { waitForReplicas?: boolean } = {}): Promise<ChaosTarget> {
    if (kind === 'cluster') {
      // cluster-node-timeout 1 s: a replica takes over 2.2-3.5 s after its master died here, within the harness's 3 s cluster session.
      const cluster = await RedisCluster.start({ nodeTimeoutMs: 1000 });
      return new ChaosTarget(kind, undefined, cluster, options.waitForReplicas === false ? undefined : CLUSTER_REPLICA_WAIT);
    }
    return new ChaosTarget(kind, await RedisServer.start({ persistence: 'aof' }), undefined, undefined);
  }

  /** The single redis-server; a fault kind that needs it refuses to run on a cluster. */
  get server(): RedisServer {
    if (!this.single) throw new Error('this fault kind needs the single redis-server (the harness runs on a cluster)');
    return this.single;
  }

  get cluster(): RedisCluster {
    if (!this.redisCluster) throw new Error('this fault kind needs a Redis Cluster (the harness runs on a single redis-server)');
    return this.redisCluster;
  }

  /**
   * A client of this process (admin, producers, sampling), through `proxy` when given (single node
   * only); `options` on top of the harness's own (an operator's client configured otherwise).
   */
  connect(proxy?: TcpProxy, options: RedisOptions = {}): RedisClient {
    const client = this.redisCluster
      ? new Cluster(this.redisCluster.startupNodes, { ...CLUSTER_OPTIONS, redisOptions: { ...CLUSTER_OPTIONS.redisOptions, ...options } })
      : new Redis(proxy?.url ?? this.server.url, { ...SINGLE_OPTIONS, ...options });
    client.on('error', () => undefined);
    return client;
  }

  /** A proxy in front of the single server; none on a cluster. */
  async proxy(): Promise<TcpProxy | undefined> {
    if (!this.single) return undefined;
    const proxy = await TcpProxy.start(this.single.port);
    this.proxies.add(proxy);
    return proxy;
  }

  /** How a member process connects: through its proxy, or to the cluster's nodes (and waiting for a replica after its acks). */
  memberConnection(proxy: TcpProxy | undefined): Pick<MemberProcessSettings, 'url' | 'clusterNodes' | 'ackWaitForReplicas'> {
    if (this.redisCluster) return { clusterNodes: this.redisCluster.startupNodes, ackWaitForReplicas: this.replicaWait };
    return { url: proxy?.url ?? this.server.url };
  }

  /** Stops every proxy made here (stopping one twice is harmless), then Redis. */
  async stop(): Promise<void> {
    await Promise.all([...this.proxies].map((proxy) => proxy.stop().catch(() => undefined)));
    this.proxies.clear();
    await (this.redisCluster ?? this.single)?.stop();
  }
}
