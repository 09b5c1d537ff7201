import type { ShardState, Work } from '../shard-state';

/**
 * The member's workers as a piece of work sees them (the dispatcher keeps them). A worker is what
 * `runtimeMaxConcurrency` counts: held while a handler call runs, given back while the work waits
 * (a retry's backoff, a dead-letter write and its retries, a pause, an unsafe lease), so that one
 * shard's wait never stops the others (SPEC 10.8). The work keeps its lane all along: its shard's
 * (its key's) later entries wait for it either way (SPEC 5 order).
 */
export interface Workers {
  /** `work` is about to wait: its worker (if it holds one) goes to other work. Its lane stays held. */
  release(state: ShardState, work: Work): void;
  /**
   * Resolves true once `work` holds a worker and handlers may start (lease safe, not paused): at once
   * when both hold now, else in its shard's turn. False if the shard was released first (the entry
   * stays pending for whoever owns the shard next).
   */
  acquire(state: ShardState, work: Work): Promise<boolean>;
}
