import { AckRefusedError, type AckRefusalReason, HandlerAbortedError, NackedError } from '../consumption-errors';
import type { AckOutcome } from './ack-batcher';
import { checkOption } from '../../protocol/option-ranges';

/** Reports a refused ack/nack ('ack-refused' event, `stats().refusedAcks`) and returns the error to reject with. */
export type RefuseAck = (reason: AckRefusalReason, entryId: string, message: string) => AckRefusedError;

/**
 * One attempt of an entry under ackMode 'manual': `message.ack()`/`nack()` settle it, once. The
 * attempt's `outcome` resolves on ack and rejects on nack, on the handler's own failure before it
 * settled, or when its call is aborted (ack timeout, revocation, lease lost, stop); whatever
 * settles it later is refused and reported.
 */
export class ManualSettlement {
  readonly outcome: Promise<void>;
  private resolveOutcome!: () => void;
  private rejectOutcome!: (error: unknown) => void;
  /** Set once settled: why a later ack/nack is refused. */
  private closed: AckRefusalReason | undefined;
  private landed: { resolve: () => void; reject: (error: unknown) => void } | undefined;

  constructor(
    private readonly entryId: string,
    private readonly shardIndex: number,
    signal: AbortSignal,
    private readonly refuse: RefuseAck,
  ) {
    this.outcome = new Promise<void>((resolve, reject) => {
      this.resolveOutcome = resolve;
      this.rejectOutcome = reject;
    });
    // Nobody may be listening when the handler failed first: the dispatcher reads `outcome` then.
    this.outcome.catch(() => undefined);
    signal.addEventListener(
      'abort',
      () => {
        const reason = signal.reason as unknown;
        const lost = reason instanceof HandlerAbortedError && reason.reason !== 'handler-timeout' && reason.reason !== 'ack-timeout';
        this.close(lost ? 'released' : 'settled', reason);
      },
      { once: true },
    );
  }

  readonly ack = (): Promise<void> => {
    const refused = this.refusal('ack');
    if (refused) return Promise.reject(refused);
    this.closed = 'settled';
    const landed = new Promise<void>((resolve, reject) => {
      this.landed = { resolve, reject };
    });
    this.resolveOutcome();
    return landed;
  };

  readonly nack = (options?: { retryAfterMs?: number; reason?: string; defer?: boolean }): Promise<void> => {
    const retryAfterMs = options?.retryAfterMs;
    if (options?.defer !== undefined && typeof options.defer !== 'boolean') {
      return Promise.reject(new TypeError(`nack: defer must be a boolean, got ${JSON.stringify(options.defer)}`));
    }
    try {
      if (retryAfterMs !== undefined) checkOption('member.nack.retryAfterMs', retryAfterMs, { label: 'nack: retryAfterMs' });
    } catch (error) {
      return Promise.reject(error);
    }
    const refused = this.refusal('nack');
    if (refused) return Promise.reject(refused);
    this.close('settled', new NackedError(options?.reason ?? `entry ${this.entryId} was nacked`, retryAfterMs, options?.defer === true));
    return Promise.resolve();
  };

  /** The handler failed (threw, rejected): fails the attempt unless it was settled already. */
  handlerFailed(error: unknown): void {
    this.close('settled', error);
  }

  /** What became of the acknowledgement `ack()` asked for. */
  acknowledged(outcome: AckOutcome): void {
    const landed = this.landed;
    if (!landed) return;
    if (outcome === 'accepted') landed.resolve();
    else if (outcome === 'refused')
      landed.reject(
        this.refuse(
          'fenced',
          this.entryId,
          `shard ${this.shardIndex}: the acknowledgement of ${this.entryId} was refused: the shard has a new owner, which runs the entry again`,
        ),
      );
    else
      landed.reject(
        this.refuse(
          'unsent',
          this.entryId,
          `shard ${this.shardIndex}: the acknowledgement of ${this.entryId} could not be sent (Redis unreachable); the entry stays pending and runs again`,
        ),
      );
  }

  private close(reason: AckRefusalReason, error: unknown): void {
    if (this.closed) return;
    this.closed = reason;
    this.rejectOutcome(error);
  }

  private refusal(what: 'ack' | 'nack'): AckRefusedError | undefined {
    if (this.closed === undefined) return undefined;
    const why =
      this.closed === 'released'
        ? `shard ${this.shardIndex} was revoked or lost before it was called; its next owner runs the entry again`
        : 'the entry was already settled (acked, nacked, failed, or ackTimeoutMs passed)';
    return this.refuse(this.closed, this.entryId, `${what}() of ${this.entryId} refused: ${why}`);
  }
}

/**
 * `ack`/`nack` of every message under ackMode 'auto' (shared, nothing allocated per entry): refused,
 * the member acknowledges when the handler returns. A mistake in the code, not an event to report.
 */
export function autoModeAck(this: { id?: string } | undefined): Promise<void> {
  return Promise.reject(
    new AckRefusedError(
      'auto',
      this?.id ?? '',
      `ack() refused: ackMode is 'auto', the entry is acknowledged when its handler returns (set ackMode: 'manual')`,
    ),
  );
}
export function autoModeNack(this: { id?: string } | undefined): Promise<void> {
  return Promise.reject(
    new AckRefusedError(
      'auto',
      this?.id ?? '',
      `nack() refused: ackMode is 'auto', a handler fails an entry by throwing (set ackMode: 'manual')`,
    ),
  );
}
