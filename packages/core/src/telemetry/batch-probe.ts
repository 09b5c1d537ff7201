import type { Context, Span } from '@opentelemetry/api';
import type { StreamMessage } from '../protocol/entry-format';
import type { BatchCallProbe } from './member-instrumentation';
import type { Otel } from './otel-api';
import { runInContext } from './run-in-context';
import { ATTR } from './semantic-conventions';

/** What a batch probe reports its call to: the member's telemetry. */
export interface BatchRecorder {
  recordHandler(seconds: number, errorType: string | undefined): void;
  recordBatchSize(size: number): void;
  /** Something of OpenTelemetry threw while a call was recorded (see MemberTelemetry.probeFailed). */
  probeFailed(error: unknown): void;
}

/**
 * One batch handler call being measured and traced (`batch` member option); made only when metrics
 * or tracing is on. The call is one `process` span and one `messaging.process.duration` point, like a
 * single entry's call, and its size one `rsc.consumer.batch.size` point.
 */
export class BatchProbe implements BatchCallProbe {
  private readonly startedAt = performance.now();

  constructor(
    private readonly recorder: BatchRecorder,
    private readonly api: Otel,
    private readonly size: number,
    private readonly span: Span | undefined,
    private readonly spanContext: Context | undefined,
  ) {}

  /** Calls the handler inside the batch's span context, so that spans it starts are its children. */
  run<R>(handler: (messages: StreamMessage[]) => R, messages: StreamMessage[]): R {
    if (!this.spanContext) return handler(messages);
    // The handler's own outcome counts, whatever the context manager does (runInContext).
    return runInContext(this.api, this.spanContext, handler, messages, (error) => this.recorder.probeFailed(error));
  }

  /**
   * The call settled. `failedIndex` is the entry a `BatchError` named (the entries before it were
   * handled); the error recorded is then the BatchError's cause, the entry's own failure.
   */
  end(outcome: { error: unknown; failedIndex: number | undefined } | undefined): void {
    try {
      this.record(outcome);
    } catch (error) {
      this.recorder.probeFailed(error);
    }
  }

  private record(outcome: { error: unknown; failedIndex: number | undefined } | undefined): void {
    const failure =
      outcome === undefined
        ? undefined
        : outcome.failedIndex === undefined
          ? outcome.error
          : ((outcome.error as Error).cause ?? outcome.error);
    const errorType = outcome === undefined ? undefined : errorTypeOf(failure);
    this.recorder.recordHandler((performance.now() - this.startedAt) / 1000, errorType);
    this.recorder.recordBatchSize(this.size);
    if (!this.span) return;
    if (outcome !== undefined) {
      if (outcome.failedIndex !== undefined) this.span.setAttribute(ATTR.batchFailedIndex, outcome.failedIndex);
      if (failure instanceof Error) this.span.recordException(failure);
      this.span.setAttribute(ATTR.errorType, errorType!);
      this.span.setStatus({ code: this.api.SpanStatusCode.ERROR, message: failure instanceof Error ? failure.message : String(failure) });
    }
    this.span.end();
  }
}

/** `error.type` of a failure: the error's name, else the type of what was thrown. */
export function errorTypeOf(error: unknown): string {
  if (error instanceof Error) return error.name || 'Error';
  return typeof error;
}
