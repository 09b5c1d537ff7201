import { Injectable } from '@nestjs/common';
import { CoordinatorRegistry, type RegisteredMember } from './coordinator.registry';
import { CoordinatorConnections } from './coordinator-connections';

export interface MemberHealth {
  memberId: string;
  memberName: string;
  streamPrefix: string;
  consumerGroup: string;
  /** The name of the connection (`forRoot({ name })`) the member uses; `'default'` when unnamed. */
  connection: string;
  /** The listener container it belongs to (`StreamListenerRegistry.get(listenerId)`), or `transport:<pattern>` for a RedisStreamsServer's member. */
  listenerId: string;
  /**
   * `running`, `paused` (joined, fetching nothing: `pause()`), or `stopped` (its container was
   * stopped, or `autoStartup: false` and not started yet). A stopped member is no readiness problem.
   */
  state: 'running' | 'paused' | 'stopped';
  joined: boolean;
  memberEpoch: number;
  ownedShards: number[];
  activeHandlers: number;
  /** What keeps this member from its work (empty when it is well): its `stats().problems`, a start it gave up, not joined. */
  problems: string[];
}

export interface ConnectionHealth {
  /** The `name` given to `forRoot`; `'default'` when unnamed. */
  name: string;
  status: 'up' | 'down';
  /** How long PING took, when it answered. */
  latencyMs?: number;
  /** Why it is down: not connected, no reply within `healthCheckTimeoutMs`, or the error Redis gave. */
  error?: string;
}

export type CoordinatorHealth = Record<
  string,
  {
    status: 'up' | 'down';
    /** Every reason for `down`, one line each; empty when up. */
    problems: string[];
    connections: ConnectionHealth[];
    members: MemberHealth[];
  }
>;

/** What liveness looks at: the members that stopped for good (nothing else makes a process unable to recover by itself). */
export type CoordinatorLiveness = Record<
  string,
  {
    status: 'up' | 'down';
    /** Every reason for `down`, one line each; empty when up. */
    problems: string[];
  }
>;

/**
 * Readiness and liveness of the application's coordinator, for Kubernetes probes through
 * `@nestjs/terminus` (an optional peer dependency) or any other health endpoint.
 *
 * - Readiness (`isReady`, `isHealthy`, `check`): every connection answers PING within
 *   `healthCheckTimeoutMs`, and every member is joined with a live lease, has nothing in
 *   `stats().problems` and has not stopped for good. A Redis outage makes it `down`: the pod gets
 *   no traffic until Redis is back, and the members rejoin by themselves.
 * - Liveness (`isLive`, `checkLiveness`): `down` only when a member stopped for good (its member id
 *   is another live process's), which nothing in the process can repair. It never looks at Redis,
 *   so a Redis outage does not make Kubernetes restart every pod at once.
 *
 * Each resolves `{ [key]: { status: 'up' | 'down', ... } }` and never rejects when down: terminus
 * answers 503 for a `down` result, but 500 for an indicator that rejects.
 *
 * @example
 * @Get('health/ready') @HealthCheck()
 * ready() { return this.health.check([() => this.coordinator.isReady('coordinator')]); }
 * @Get('health/live') @HealthCheck()
 * live() { return this.health.check([() => this.coordinator.isLive('coordinator')]); }
 */
@Injectable()
export class CoordinatorHealthIndicator {
  constructor(
    private readonly registry: CoordinatorRegistry,
    private readonly connections: CoordinatorConnections,
  ) {}

  async check(key = 'coordinator'): Promise<CoordinatorHealth> {
    const connections = await Promise.all(
      this.connections.all().map(async (connection): Promise<ConnectionHealth> => {
        const ping = await connection.ping();
        return ping.ok
          ? { name: connection.name, status: 'up', latencyMs: ping.latencyMs }
          : { name: connection.name, status: 'down', error: ping.error };
      }),
    );
    const members = this.allMembers().map(({ member, source, connection, fatalError, listenerId, desired }): MemberHealth => {
      const stats = member.stats();
      // A member stopped on purpose (its container's stop(), autoStartup false) is not expected to be joined.
      const stopped = desired === 'stopped' && !stats.running;
      const problems = [
        ...(fatalError ? [fatalError] : []),
        ...(!stats.joined && !fatalError && !stopped ? ['not joined with a live lease'] : []),
        ...stats.problems,
      ];
      return {
        memberId: member.memberId,
        memberName: member.options.memberName ?? source,
        streamPrefix: member.options.streamPrefix,
        consumerGroup: member.options.consumerGroup,
        connection: connection.name,
        listenerId,
        state: stopped ? 'stopped' : stats.paused ? 'paused' : 'running',
        joined: stats.joined,
        memberEpoch: stats.memberEpoch,
        ownedShards: stats.ownedShards,
        activeHandlers: stats.activeHandlers,
        problems,
      };
    });
    const problems = [
      ...connections.filter((c) => c.status === 'down').map((c) => `Redis connection "${c.name}": ${c.error}`),
      ...members.flatMap((m) => m.problems.map((p) => `member ${m.memberId} (${m.memberName}): ${p}`)),
    ];
    return { [key]: { status: problems.length === 0 ? 'up' : 'down', problems, connections, members } };
  }

  /** Readiness, as a terminus indicator: the same as `check` (it resolves `down`, never rejects). */
  isReady(key = 'coordinator'): Promise<CoordinatorHealth> {
    return this.check(key);
  }

  /** Readiness: kept as the indicator's name that terminus users know. The same as `isReady`. */
  isHealthy(key = 'coordinator'): Promise<CoordinatorHealth> {
    return this.check(key);
  }

  /** Liveness: down only when a member stopped for good. Never talks to Redis. */
  checkLiveness(key = 'coordinator'): CoordinatorLiveness {
    const problems = this.allMembers()
      .filter((entry) => entry.fatalError)
      .map(({ member, source, fatalError }) => `member ${member.memberId} (${member.options.memberName ?? source}): ${fatalError}`);
    return { [key]: { status: problems.length === 0 ? 'up' : 'down', problems } };
  }

  /** Liveness, as a terminus indicator (async only for terminus' signature). */
  async isLive(key = 'coordinator'): Promise<CoordinatorLiveness> {
    return this.checkLiveness(key);
  }

  /** The module's members, then those a transport server built from one of its connections runs on it. */
  private allMembers(): Pick<RegisteredMember, 'member' | 'source' | 'connection' | 'fatalError' | 'listenerId' | 'desired'>[] {
    return [
      ...this.registry.entries(),
      ...this.connections
        .all()
        .flatMap((connection) =>
          connection
            .reportedMembers()
            .map((reported) => ({ ...reported, source: reported.listenerId, connection, desired: 'running' as const })),
        ),
    ];
  }
}
