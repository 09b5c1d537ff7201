import type { ChainableCommander } from 'ioredis';
import { checkOption } from '../../protocol/option-ranges';

/**
 * `WAIT numreplicas timeout` after a write, on the connection that wrote it: how many replicas of
 * the master must have the write, and how long to wait for them (docs/cluster.md, "Durability").
 */
export interface ReplicaWait {
  replicas: number;
  timeoutMs: number;
}

/**
 * A write (an entry, or an acknowledgement) that reached the master but that `WAIT` did not see on
 * the requested number of replicas in time. It is not undone: it stays, unless a failover promotes
 * a replica that does not have it.
 */
export class NotReplicatedError extends Error {
  constructor(
    message: string,
    /** Replicas WAIT counted. */
    readonly replicas: number,
    /** Replicas asked for. */
    readonly required: number,
  ) {
    super(message);
    this.name = 'NotReplicatedError';
  }
}

export function waitCommand(pipeline: ChainableCommander, wait: ReplicaWait): void {
  pipeline.call('WAIT', wait.replicas, wait.timeoutMs);
}

/** Undefined when WAIT counted enough replicas; else how many it counted, and why in words. */
export function waitShortfall([error, reply]: [Error | null, unknown], wait: ReplicaWait): { replicas: number; why: string } | undefined {
  const replicas = error ? 0 : Number(reply);
  if (replicas >= wait.replicas) return undefined;
  return {
    replicas,
    why: error ? `WAIT failed (${error.message})` : `WAIT counted ${replicas} of ${wait.replicas} replica(s) within ${wait.timeoutMs} ms`,
  };
}

/** Validates a `waitForReplicas` option (the producer's, or a member's `ackWaitForReplicas`). */
export function assertReplicaWait(name: string, value: ReplicaWait | undefined): ReplicaWait | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'object' || value === null)
    throw new TypeError(`${name} must be { replicas, timeoutMs }, got ${JSON.stringify(value)}`);
  return {
    replicas: checkOption('replicaWait.replicas', value.replicas, { label: `${name}.replicas` }),
    timeoutMs: checkOption('replicaWait.timeoutMs', value.timeoutMs, { label: `${name}.timeoutMs` }),
  };
}
