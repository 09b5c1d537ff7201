import type { Cluster } from 'ioredis';
import { resetConnection } from '../connection/connection-reset';
import { perClient } from '../connection/per-client';
import { ensureScripts } from '../scripts';
import { ReadDeadlineError } from '../connection/read-deadline';
import { duplicateCluster, execByNode, type NodeBatch, type SlotBatchResult } from '../connection/slot-pipelines';
import { BufferBudget } from './buffer-budget';

/** A request of one member's read round, until its node pipelines answered (or its deadline passed). */
interface Request {
  batches: readonly NodeBatch[];
  resolve: (results: SlotBatchResult[]) => void;
  reject: (error: Error) => void;
}

/**
 * The read connection of one process on a Redis Cluster, per base client (like ReadHub on a single
 * Redis, ShardWakeHub for wake-ups): every member made from that client sends its polled per-shard
 * reads through one duplicated Cluster, so a process holds one read connection per node, not one
 * per node and member. The read requests of all members made within one turn of the event loop
 * go out together, one pipeline per node (`execByNode`): each shard's read keeps its own replies,
 * and one whose slot moved (MOVED, ASK) or is refused for now (TRYAGAIN) is sent again alone
 * without failing the others.
 *
 * A read that does not come back within its deadline (a half-open socket) resets the connection
 * (once for all the reads sent before that reset, not once per member) and is reported lost: what
 * it delivered, if it ran, is pending under its member untracked, where the member's gap check and
 * own-pending sweep find it (the rule of every read, SPEC 9). The connection opens with the first
 * member and closes with the last.
 */
export class ClusterReadHub {
  private static readonly hubs = perClient((base: Cluster) => new ClusterReadHub(base));
  /** The entries the hub's members may buffer, together (maxBufferedEntriesPerClient). */
  readonly budget = new BufferBudget();
  private readonly users = new Set<object>();
  private connection: Cluster | undefined;
  /** Bumped by each reset: a read sent before the last reset does not reset the connection again. */
  private generation = 0;
  private queue: Request[] = [];

  private constructor(private readonly base: Cluster) {}

  static for(base: Cluster): ClusterReadHub {
    return ClusterReadHub.hubs(base);
  }

  /** Starts serving `user` (a member's reader); returns the function that stops. The last to stop closes the connection. */
  register(user: object): () => void {
    this.users.add(user);
    this.connection ??= this.open();
    return () => {
      if (!this.users.delete(user) || this.users.size > 0) return;
      const connection = this.connection;
      this.connection = undefined;
      connection?.disconnect();
    };
  }

  /** Whether the connection is open (some member registered). */
  get isOpen(): boolean {
    return this.connection !== undefined;
  }

  /**
   * Sends the batches (each one shard's commands, all of one slot) with those of every other
   * request made in this turn of the event loop, one pipeline per node. Resolves with each batch's
   * replies; rejects with ReadDeadlineError when they have not all come back within `deadlineMs`
   * (the connection is reset then, see above), or when no member is registered.
   */
  exec(batches: readonly NodeBatch[], deadlineMs: number): Promise<SlotBatchResult[]> {
    if (!this.connection) return Promise.reject(new Error('the shared read connection is closed (no member reads through it)'));
    const sentIn = this.generation;
    let timer: NodeJS.Timeout | undefined;
    const replies = new Promise<SlotBatchResult[]>((resolve, reject) => {
      if (this.queue.length === 0) setImmediate(() => this.flush());
      this.queue.push({ batches, resolve, reject });
    });
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new ReadDeadlineError(`the read did not come back within ${deadlineMs} ms; ${this.reset(sentIn)}`)),
        deadlineMs,
      );
    });
    replies.catch(() => undefined); // abandoned past the deadline: settles later, nobody waits
    return Promise.race([replies, deadline]).finally(() => clearTimeout(timer));
  }

  /**
   * ioredis gave the connection up for good ("end": a (re)connect failed in certain ways): every
   * read would fail "Connection is closed." while the members keep their shards. It is opened again.
   */
  repair(): void {
    if (this.connection?.status === 'end') this.connection.connect().catch(() => undefined);
  }

  private open(): Cluster {
    // Same options as the base client (password, ACL user, TLS, per-node options).
    const connection = duplicateCluster(this.base);
    connection.on('error', () => undefined); // reported by the members through their read loops
    ensureScripts(connection);
    return connection;
  }

  private flush(): void {
    const requests = this.queue;
    this.queue = [];
    const connection = this.connection;
    if (!connection) {
      for (const request of requests) request.reject(new Error('the shared read connection closed before the read was sent'));
      return;
    }
    const all = requests.flatMap((request) => request.batches);
    execByNode(connection, all).then(
      (results) => {
        let offset = 0;
        for (const request of requests) {
          request.resolve(results.slice(offset, offset + request.batches.length));
          offset += request.batches.length;
        }
      },
      (error: Error) => {
        for (const request of requests) request.reject(error);
      },
    );
  }

  /** Resets the connection unless it was reset since `sentIn` (every read sent before that already lost its socket). */
  private reset(sentIn: number): string {
    if (sentIn !== this.generation || !this.connection) return 'the shared read connection was reset already';
    this.generation += 1;
    return resetConnection(this.connection, 'shared read');
  }
}
