import type { Attributes, Context, Counter, Histogram, Meter, Span, Tracer } from '@opentelemetry/api';
import type { OutgoingMessage } from '../protocol/entry-format';
import { INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION, type Otel, otelApi, registeredMeter, tracerProviderRegistered } from './otel-api';
import { ATTR, FAST_BUCKETS_S, MESSAGING_SYSTEM, METRIC } from './semantic-conventions';

/** How often a producer without a meter provider looks again (one may be registered after it was made). */
const METER_RECHECK_MS = 5000;

interface ProducerInstruments {
  sent: Counter;
  duration: Histogram;
}

const instrumentsByMeter = new WeakMap<Meter, ProducerInstruments>();

function instrumentsOf(meter: Meter): ProducerInstruments {
  let instruments = instrumentsByMeter.get(meter);
  if (!instruments) {
    instruments = {
      sent: meter.createCounter(METRIC.sentMessages, {
        unit: '{message}',
        description: 'Entries written by StreamProducer (error.type set on those not written)',
      }),
      duration: meter.createHistogram(METRIC.operationDuration, {
        unit: 's',
        description: 'Duration of one send or sendBatch, re-routes included',
        advice: { explicitBucketBoundaries: FAST_BUCKETS_S },
      }),
    };
    instrumentsByMeter.set(meter, instruments);
  }
  return instruments;
}

/** One send or sendBatch being traced and measured. */
export class PublishProbe {
  private readonly startedAt = performance.now();

  constructor(
    private readonly telemetry: ProducerTelemetry,
    private readonly api: Otel,
    private readonly span: Span | undefined,
    private readonly spanContext: Context | undefined,
  ) {}

  /**
   * The messages to encode: copies whose headers carry the publish span's context (`traceparent`,
   * and whatever else the registered propagator writes). The caller's objects are left alone.
   */
  inject<T>(messages: OutgoingMessage<T>[]): OutgoingMessage<T>[] {
    if (!this.spanContext) return messages;
    const context = this.spanContext;
    return messages.map((message) => {
      const headers: Record<string, string> = { ...message.headers };
      this.api.propagation.inject(context, headers);
      return { ...message, headers };
    });
  }

  /** The write is over: `written` entries landed, `failed` did not (`error` says why). */
  end(written: { shardIndex: number; id: string }[], failed: number, error?: unknown): void {
    this.telemetry.record((performance.now() - this.startedAt) / 1000, written.length, failed, error);
    const span = this.span;
    if (!span) return;
    if (written.length === 1 && failed === 0) {
      span.setAttribute(ATTR.messageId, written[0].id);
      span.setAttribute(ATTR.partition, String(written[0].shardIndex));
    }
    if (error !== undefined) {
      if (error instanceof Error) span.recordException(error);
      span.setAttribute(ATTR.errorType, error instanceof Error ? error.name || 'Error' : typeof error);
      span.setStatus({ code: this.api.SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
    }
    span.end();
  }
}

/**
 * The OpenTelemetry side of a StreamProducer: a `publish` span per send (its context injected into
 * each entry's headers, so the member's `process` span is its child) and the sent-messages counter
 * and duration histogram. Nothing is allocated per send when neither a tracer nor a meter provider
 * is registered.
 */
export class ProducerTelemetry {
  private readonly api = otelApi();
  private tracer: Tracer | undefined;
  private instruments: ProducerInstruments | undefined;
  private meterCheckedAt = Number.NEGATIVE_INFINITY;
  private readonly base: Attributes;
  private readonly errorAttributes = new Map<string, Attributes>();

  constructor(private readonly streamPrefix: string) {
    this.base = { [ATTR.system]: MESSAGING_SYSTEM, [ATTR.destination]: streamPrefix, [ATTR.operationName]: 'publish' };
  }

  /** A send of `count` entries begins: undefined when neither tracing nor metrics is on. */
  start(count: number): PublishProbe | undefined {
    const api = this.api;
    if (!api) return undefined;
    this.refreshInstruments(api);
    const tracing = tracerProviderRegistered(api);
    if (!tracing && !this.instruments) return undefined;
    if (!tracing) return new PublishProbe(this, api, undefined, undefined);
    this.tracer ??= api.trace.getTracer(INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION);
    const attributes: Attributes = {
      [ATTR.system]: MESSAGING_SYSTEM,
      [ATTR.operationType]: 'send',
      [ATTR.operationName]: 'publish',
      [ATTR.destination]: this.streamPrefix,
    };
    if (count > 1) attributes[ATTR.batchCount] = count;
    const parent = api.context.active();
    const span = this.tracer.startSpan(`publish ${this.streamPrefix}`, { kind: api.SpanKind.PRODUCER, attributes }, parent);
    return new PublishProbe(this, api, span, api.trace.setSpan(parent, span));
  }

  /** @internal from PublishProbe */
  record(seconds: number, written: number, failed: number, error: unknown): void {
    const instruments = this.instruments;
    if (!instruments) return;
    const failedAttributes =
      error === undefined ? this.base : this.withError(error instanceof Error ? error.name || 'Error' : typeof error);
    instruments.duration.record(seconds, failedAttributes);
    if (written > 0) instruments.sent.add(written, this.base);
    if (failed > 0) instruments.sent.add(failed, failedAttributes);
  }

  /** The metrics API has no proxy: look for a registered provider now and then, not per send. */
  private refreshInstruments(api: Otel): void {
    if (this.instruments) return;
    const now = performance.now();
    if (now - this.meterCheckedAt < METER_RECHECK_MS) return;
    this.meterCheckedAt = now;
    const meter = registeredMeter(api);
    if (meter) this.instruments = instrumentsOf(meter);
  }

  private withError(errorType: string): Attributes {
    let attributes = this.errorAttributes.get(errorType);
    if (!attributes) {
      attributes = { ...this.base, [ATTR.errorType]: errorType };
      if (this.errorAttributes.size < 100) this.errorAttributes.set(errorType, attributes);
    }
    return attributes;
  }
}
