import { Injectable } from '@nestjs/common';
import { CoordinatorRegistry } from './coordinator.registry';
import { CoordinatorConnections } from './coordinator-connections';

export interface MemberHealth {
  memberId: string;
  memberName: string;
  streamPrefix: string;
  consumerGroup: string;
  /** The name of the connection (`forRoot({ name })`) the member uses; `'default'` when unnamed. */
  connection: string;
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

/**
 * What `isHealthy` throws when down, in the shape `@nestjs/terminus` expects of an indicator's
 * error (`isHealthCheckError`, `causes`): terminus then answers 503 with the causes, where any other
 * error would be rethrown as a 500.
 */
export class CoordinatorHealthError extends Error {
  readonly isHealthCheckError = true;

  constructor(readonly causes: CoordinatorHealth) {
    const problems = Object.values(causes).flatMap((c) => c.problems);
    super(`coordinator is down: ${problems.join('; ')}`);
    this.name = 'CoordinatorHealthError';
  }
}

/**
 * Checks every connection (a PING with a deadline, `healthCheckTimeoutMs`) and every member (joined
 * with a live lease, nothing in `stats().problems`, not given up on starting). `up` only when all are
 * well; otherwise `down` with each reason in `problems`. Works with `@nestjs/terminus` (an optional
 * peer dependency):
 *
 * @example
 * @Get('health') @HealthCheck()
 * check() { return this.health.check([() => this.coordinator.isHealthy('coordinator')]); }
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
    const members = this.registry.entries().map(({ member, source, connection, fatalError }): MemberHealth => {
      const stats = member.stats();
      const problems = [...(fatalError ? [fatalError] : []), ...(!stats.joined && !fatalError ? ['not joined with a live lease'] : []), ...stats.problems];
      return {
        memberId: member.memberId,
        memberName: member.options.memberName ?? source,
        streamPrefix: member.options.streamPrefix,
        consumerGroup: member.options.consumerGroup,
        connection: connection.name,
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

  /** `check`, but throws CoordinatorHealthError when down (what terminus expects of an indicator). */
  async isHealthy(key = 'coordinator'): Promise<CoordinatorHealth> {
    const result = await this.check(key);
    if (result[key].status === 'down') throw new CoordinatorHealthError(result);
    return result;
  }
}
