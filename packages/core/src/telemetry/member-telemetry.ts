import type {
  Attributes,
  BatchObservableResult,
  Context,
  Counter,
  Histogram,
  Meter,
  ObservableGauge,
  Span,
  Tracer,
} from '@opentelemetry/api';
import type { DeadLetterCause } from '../protocol/dead-letter-cause';
import type { StreamMessage } from '../protocol/entry-format';
import { ErrorCode } from '../protocol/error-codes';
import type { HeartbeatObservation } from '../redis/coordinator-options';
import { BatchProbe, type BatchRecorder, errorTypeOf } from './batch-probe';
import type { HandlerCallProbe, MemberInstrumentation, ShardPositions, TelemetryTarget } from './member-instrumentation';
import { runInContext } from './run-in-context';
import { INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION, type Otel, otelApi, registeredMeter, tracerProviderRegistered } from './otel-api';
import { ATTR, BATCH_SIZE_BUCKETS, FAST_BUCKETS_S, MESSAGING_SYSTEM, METRIC, REBALANCE_BUCKETS_S } from './semantic-conventions';

/**
 * Lag and pending are read from Redis when a metric reader collects (a Prometheus scrape, a periodic
 * export), at most once per this interval whatever the number of readers, and never on the
 * processing path.
 */
export const POSITIONS_MIN_INTERVAL_MS = 1000;
/** A lag read slower than this is given up for this collection (the gauges skip it, an 'error' says so). */
export const POSITIONS_TIMEOUT_MS = 2000;

interface MemberInstruments {
  processDuration: Histogram;
  batchSize: Histogram;
  consumed: Counter;
  acknowledged: Counter;
  retried: Counter;
  deadLettered: Counter;
  ackBatchesRefused: Counter;
  rebalances: Counter;
  rebalanceDuration: Histogram;
  heartbeatDuration: Histogram;
  lag: ObservableGauge;
  pending: ObservableGauge;
  scheduled: ObservableGauge;
  deferred: ObservableGauge;
  parked: ObservableGauge;
  dueLag: ObservableGauge;
  ownedShards: ObservableGauge;
  memberEpoch: ObservableGauge;
}

/** One set of instruments per meter, shared by every member of the process (e.g. a Nest listener's -m0 … -m3). */
const instrumentsByMeter = new WeakMap<Meter, MemberInstruments>();

function instrumentsOf(meter: Meter): MemberInstruments {
  let instruments = instrumentsByMeter.get(meter);
  if (instruments) return instruments;
  instruments = {
    processDuration: meter.createHistogram(METRIC.processDuration, {
      unit: 's',
      description: 'Duration of one handler call (each retry is one call)',
      advice: { explicitBucketBoundaries: FAST_BUCKETS_S },
    }),
    batchSize: meter.createHistogram(METRIC.batchSize, {
      unit: '{message}',
      description: 'Entries handed to one batch handler call (batch member option; each retry is one call)',
      advice: { explicitBucketBoundaries: BATCH_SIZE_BUCKETS },
    }),
    consumed: meter.createCounter(METRIC.consumedMessages, {
      unit: '{message}',
      description: 'Entries handed to a handler (first attempt; retries are counted apart)',
    }),
    acknowledged: meter.createCounter(METRIC.acknowledged, {
      unit: '{message}',
      description: 'Entries acknowledged under the fencing token (dead-lettered ones included)',
    }),
    retried: meter.createCounter(METRIC.retried, {
      unit: '{message}',
      description: 'Handler calls that failed and are tried again in place',
    }),
    deadLettered: meter.createCounter(METRIC.deadLettered, { unit: '{message}', description: 'Entries moved to the dead-letter stream' }),
    ackBatchesRefused: meter.createCounter(METRIC.ackBatchesRefused, {
      unit: '{batch}',
      description: 'Acknowledgement batches refused because the shard has a newer owner (fencing)',
    }),
    rebalances: meter.createCounter(METRIC.rebalances, {
      unit: '{rebalance}',
      description: 'Rebalances this member took part in (the group left STABLE)',
    }),
    rebalanceDuration: meter.createHistogram(METRIC.rebalanceDuration, {
      unit: 's',
      description: 'From the first heartbeat answer out of STABLE to the first one back in STABLE',
      advice: { explicitBucketBoundaries: REBALANCE_BUCKETS_S },
    }),
    heartbeatDuration: meter.createHistogram(METRIC.heartbeatDuration, {
      unit: 's',
      description: 'Round trip of one heartbeat script call',
      advice: { explicitBucketBoundaries: FAST_BUCKETS_S },
    }),
    lag: meter.createObservableGauge(METRIC.lag, {
      unit: '{message}',
      description: 'Entries of an owned shard not yet delivered to the group',
    }),
    pending: meter.createObservableGauge(METRIC.pending, {
      unit: '{message}',
      description: 'Entries of an owned shard delivered and not yet acknowledged',
    }),
    scheduled: meter.createObservableGauge(METRIC.scheduled, {
      unit: '{message}',
      description: "Delayed entries waiting in an owned shard's schedule (every group's), not due or not released yet",
    }),
    deferred: meter.createObservableGauge(METRIC.deferred, {
      unit: '{message}',
      description: "The group's deferred retries waiting on an owned shard",
    }),
    parked: meter.createObservableGauge(METRIC.parked, {
      unit: '{message}',
      description: "The group's entries parked on an owned shard behind their key's deferred retries (deferredOrder 'key')",
    }),
    dueLag: meter.createObservableGauge(METRIC.dueLag, {
      unit: 's',
      description: "How late the earliest due entry of an owned shard's schedules is (Redis' clock; 0 when none is due)",
    }),
    ownedShards: meter.createObservableGauge(METRIC.ownedShards, { unit: '{shard}', description: 'Shards this member owns' }),
    memberEpoch: meter.createObservableGauge(METRIC.memberEpoch, {
      unit: '{epoch}',
      description: "This member's epoch (0 while it joins)",
    }),
  };
  instrumentsByMeter.set(meter, instruments);
  return instruments;
}

/** A handler call being measured and traced; made only when metrics or tracing is on. */
export class HandlerProbe implements HandlerCallProbe {
  private readonly startedAt = performance.now();

  constructor(
    private readonly telemetry: MemberTelemetry,
    private readonly api: Otel,
    private readonly span: Span | undefined,
    private readonly spanContext: Context | undefined,
  ) {}

  /**
   * Calls the handler inside the process span's context, so that spans it starts are its children.
   * The handler's own outcome is what counts: a context manager that throws (before or after the
   * call) neither fails the entry nor runs the handler twice (see MemberTelemetry.probeFailed).
   */
  run<R>(handler: (message: StreamMessage) => R, message: StreamMessage): R {
    if (!this.spanContext) return handler(message);
    return runInContext(this.api, this.spanContext, handler, message, (error) => this.telemetry.probeFailed(error));
  }

  /** The call settled; `error` when it threw or rejected (or timed out). Never throws (see MemberTelemetry.probeFailed). */
  end(failed: boolean, error?: unknown): void {
    try {
      this.record(failed, error);
    } catch (failure) {
      this.telemetry.probeFailed(failure);
    }
  }

  private record(failed: boolean, error: unknown): void {
    const errorType = failed ? errorTypeOf(error) : undefined;
    this.telemetry.recordHandler((performance.now() - this.startedAt) / 1000, errorType);
    if (!this.span) return;
    if (failed) {
      if (error instanceof Error) this.span.recordException(error);
      this.span.setAttribute(ATTR.errorType, errorType!);
      this.span.setStatus({ code: this.api.SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
    }
    this.span.end();
  }
}

/**
 * The OpenTelemetry side of one member: handler duration, consumption counters and `process` spans
 * (through the dispatcher), acknowledgement and dead-letter counters (poller events), heartbeat
 * round trips, epoch and rebalances (the coordinator client's `onHeartbeat`), and observable gauges
 * for owned shards, epoch, lag and pending. Everything goes through `@opentelemetry/api`; when it is
 * not installed, or no provider is registered when the member starts, nothing is created and the
 * hot path costs one check per entry.
 */
export class MemberTelemetry implements BatchRecorder, MemberInstrumentation {
  private api: Otel | undefined;
  private instruments: MemberInstruments | undefined;
  /** The gauges' callback, registered from the first attach until the collection after the last detach. */
  private observing: { meter: Meter; instruments: ObservableGauge[] } | undefined;
  /** Shards whose lag and pending this member reported (reported as 0 once after it lost them). */
  private readonly reportedShards = new Set<number>();
  private tracer: Tracer | undefined;
  private target: TelemetryTarget | undefined;
  private memberEpoch = 0;
  /** performance.now() of the first answer out of STABLE, while a rebalance lasts. */
  private rebalanceStartedAt: number | undefined;
  private positions: { at: number; value: Promise<ShardPositions> } | undefined;
  private positionsFailing = false;
  /** A probe failed since the member started (said once: see probeFailed). */
  private probeFailing = false;
  private readonly base: Attributes;
  private readonly member: Attributes;
  private readonly shardAttributes = new Map<number, Attributes>();
  private readonly errorAttributes = new Map<string, Attributes>();
  /** `messaging.redis_streams.dead_letter.cause` attributes by DeadLetterEvent.cause. */
  private readonly deadLetterCauses: Record<DeadLetterCause, Attributes>;

  constructor(private readonly identity: { streamPrefix: string; consumerGroup: string; memberId: string }) {
    this.base = {
      [ATTR.system]: MESSAGING_SYSTEM,
      [ATTR.destination]: identity.streamPrefix,
      [ATTR.consumerGroup]: identity.consumerGroup,
    };
    this.member = { ...this.base, [ATTR.clientId]: identity.memberId };
    this.deadLetterCauses = {
      undecodable: { ...this.base, [ATTR.deadLetterCause]: 'undecodable' },
      invalid: { ...this.base, [ATTR.deadLetterCause]: 'invalid' },
      'attempts-exhausted': { ...this.base, [ATTR.deadLetterCause]: 'attempts_exhausted' },
      'non-retryable': { ...this.base, [ATTR.deadLetterCause]: 'non_retryable' },
    };
  }

  /**
   * The member starts working: instruments are taken from the providers registered now (a provider
   * registered later is used from the member's next start), poller events are counted, and the
   * gauges are observed until `detach()`.
   */
  attach(target: TelemetryTarget): void {
    this.detach();
    this.probeFailing = false;
    this.api = otelApi();
    if (!this.api) return;
    this.target = target;
    this.tracer = this.api.trace.getTracer(INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION);
    const meter = registeredMeter(this.api);
    if (!meter) return;
    const instruments = instrumentsOf(meter);
    this.instruments = instruments;
    target.events.on('acknowledged', this.onAcknowledged);
    target.events.on('dead-letter', this.onDeadLetter);
    if (this.observing?.meter !== meter) {
      this.unobserve();
      this.observing = {
        meter,
        instruments: [
          instruments.lag,
          instruments.pending,
          instruments.ownedShards,
          instruments.memberEpoch,
          instruments.scheduled,
          instruments.deferred,
          instruments.parked,
          instruments.dueLag,
        ],
      };
      meter.addBatchObservableCallback(this.observe, this.observing.instruments);
    }
  }

  /**
   * The member stopped: listeners removed, and the gauges observed once more as 0 (owned shards,
   * and lag and pending of the shards it reported) before their callback goes. Cumulative exporters
   * (Prometheus) keep a series' last value when it is no longer observed: a stopped member would
   * otherwise go on counting its shards in every sum.
   */
  detach(): void {
    this.target?.events.off('acknowledged', this.onAcknowledged);
    this.target?.events.off('dead-letter', this.onDeadLetter);
    this.target = undefined;
    this.instruments = undefined;
    this.positions = undefined;
    this.rebalanceStartedAt = undefined;
  }

  private unobserve(): void {
    if (!this.observing) return;
    this.observing.meter.removeBatchObservableCallback(this.observe, this.observing.instruments);
    this.observing = undefined;
  }

  /**
   * A handler call is about to start: undefined (nothing allocated) when neither metrics nor tracing
   * is on. The `process` span is the child of the producer's context found in the entry's headers.
   */
  startHandler(message: StreamMessage, attempt: number): HandlerProbe | undefined {
    try {
      return this.probeHandler(message, attempt);
    } catch (error) {
      this.probeFailed(error);
      return undefined;
    }
  }

  private probeHandler(message: StreamMessage, attempt: number): HandlerProbe | undefined {
    const api = this.api;
    if (!api) return undefined;
    if (attempt === 1) this.instruments?.consumed.add(1, this.base);
    const tracing = this.tracer !== undefined && tracerProviderRegistered(api);
    if (!tracing && !this.instruments) return undefined;
    if (!tracing) return new HandlerProbe(this, api, undefined, undefined);
    const parent = api.propagation.extract(api.context.active(), message.headers);
    const attributes: Attributes = {
      ...this.processAttributes(message.shardIndex),
      [ATTR.messageId]: message.id,
      [ATTR.deliveryCount]: message.deliveryCount,
    };
    if (message.key !== undefined) attributes[ATTR.messageKey] = message.key;
    const span = this.tracer!.startSpan(`process ${this.identity.streamPrefix}`, { kind: api.SpanKind.CONSUMER, attributes }, parent);
    return new HandlerProbe(this, api, span, api.trace.setSpan(parent, span));
  }

  /**
   * A batch handler call is about to start (`batch` member option): undefined (nothing allocated)
   * when neither metrics nor tracing is on. `firstCall` says the entries are handed for the first
   * time (they count as consumed); a retry of some of them is a call of its own. The `process` span
   * has the ambient context as parent and a link to each entry's producer context: a batch has
   * many parents (OpenTelemetry's messaging conventions for batch processing).
   */
  startBatch(messages: readonly StreamMessage[], shardIndex: number, firstCall: boolean): BatchProbe | undefined {
    try {
      return this.probeBatch(messages, shardIndex, firstCall);
    } catch (error) {
      this.probeFailed(error);
      return undefined;
    }
  }

  private probeBatch(messages: readonly StreamMessage[], shardIndex: number, firstCall: boolean): BatchProbe | undefined {
    const api = this.api;
    if (!api) return undefined;
    if (firstCall) this.instruments?.consumed.add(messages.length, this.base);
    const tracing = this.tracer !== undefined && tracerProviderRegistered(api);
    if (!tracing && !this.instruments) return undefined;
    if (!tracing) return new BatchProbe(this, api, messages.length, undefined, undefined);
    const active = api.context.active();
    const links = [];
    for (const message of messages) {
      const producer = api.trace.getSpanContext(api.propagation.extract(active, message.headers));
      if (producer && api.trace.isSpanContextValid(producer)) links.push({ context: producer });
    }
    const attributes: Attributes = {
      ...this.processAttributes(shardIndex),
      [ATTR.batchCount]: messages.length,
      [ATTR.batchFirstMessageId]: messages[0].id,
      [ATTR.batchLastMessageId]: messages[messages.length - 1].id,
      // The most tries any entry of the call has had (1 on a first call of fresh entries).
      [ATTR.deliveryCount]: Math.max(...messages.map((m) => m.deliveryCount)),
    };
    const span = this.tracer!.startSpan(
      `process ${this.identity.streamPrefix}`,
      { kind: api.SpanKind.CONSUMER, attributes, links },
      active,
    );
    return new BatchProbe(this, api, messages.length, span, api.trace.setSpan(active, span));
  }

  /** What every `process` span says, a single entry's or a batch's. */
  private processAttributes(shardIndex: number): Attributes {
    return {
      [ATTR.system]: MESSAGING_SYSTEM,
      [ATTR.operationType]: 'process',
      [ATTR.operationName]: 'process',
      [ATTR.destination]: this.identity.streamPrefix,
      [ATTR.consumerGroup]: this.identity.consumerGroup,
      [ATTR.clientId]: this.identity.memberId,
      [ATTR.partition]: String(shardIndex),
    };
  }

  /**
   * @internal Something of OpenTelemetry threw on the hot path: the application's propagator (on
   * an entry's headers, which any producer writes), tracer, span processor or meter. The handler call
   * runs (or ran) all the same, unrecorded: a failure there must not fail an entry, and a probe that
   * threw before the call would leave the entry in flight for ever, its lane blocked. One 'error'
   * event per start of the member says so (at thousands of entries a second, one each would flood).
   */
  probeFailed(error: unknown): void {
    if (this.probeFailing) return;
    this.probeFailing = true;
    try {
      this.target?.reportError(
        new Error(
          `telemetry: recording a handler call failed, handlers run on unrecorded (said once until the member starts again): ${error instanceof Error ? error.message : String(error)}`,
          { cause: error },
        ),
      );
    } catch {
      // A member without an 'error' listener throws here (EventEmitter): the call must run all the same.
    }
  }

  /** @internal from BatchProbe */
  recordBatchSize(size: number): void {
    this.instruments?.batchSize.record(size, this.base);
  }

  /** @internal from HandlerProbe and BatchProbe */
  recordHandler(seconds: number, errorType: string | undefined): void {
    this.instruments?.processDuration.record(seconds, errorType === undefined ? this.base : this.withError(errorType));
  }

  /** A failed handler call will be tried again in place. */
  retried(): void {
    this.instruments?.retried.add(1, this.base);
  }

  /** CoordinatorOptions.onHeartbeat of the member's coordinator client. */
  readonly onHeartbeat = (observation: HeartbeatObservation): void => {
    const { response } = observation;
    this.instruments?.heartbeatDuration.record(
      observation.roundTripMs / 1000,
      response ? this.member : this.withError(errorTypeOf(observation.error), this.member),
    );
    if (!response) return;
    if (response.errorCode !== ErrorCode.NONE) {
      // Refused as fenced or unknown: the member drops everything and rejoins with epoch 0.
      if (response.errorCode === ErrorCode.UNKNOWN_MEMBER_ID || response.errorCode === ErrorCode.FENCED_MEMBER_EPOCH) {
        this.memberEpoch = 0;
        this.rebalanceStartedAt = undefined;
      }
      return;
    }
    this.memberEpoch = Math.max(0, response.memberEpoch);
    const rebalancing = response.state === 'ASSIGNING' || response.state === 'RECONCILING';
    if (rebalancing && this.rebalanceStartedAt === undefined && observation.request.memberEpoch >= 0) {
      this.rebalanceStartedAt = performance.now();
      this.instruments?.rebalances.add(1, this.member);
    } else if (!rebalancing && this.rebalanceStartedAt !== undefined) {
      this.instruments?.rebalanceDuration.record((performance.now() - this.rebalanceStartedAt) / 1000, this.member);
      this.rebalanceStartedAt = undefined;
    }
  };

  private readonly onAcknowledged = (event: { ids: string[]; accepted: boolean }): void => {
    if (event.accepted) this.instruments?.acknowledged.add(event.ids.length, this.base);
    else this.instruments?.ackBatchesRefused.add(1, this.base);
  };

  private readonly onDeadLetter = (event: { cause: DeadLetterCause }): void => {
    this.instruments?.deadLettered.add(1, this.deadLetterCauses[event.cause] ?? this.base);
  };

  /** Gauges, at each collection: owned shards and epoch from memory, lag and pending from Redis (rate-limited). */
  private readonly observe = async (result: BatchObservableResult): Promise<void> => {
    const target = this.target;
    const observing = this.observing;
    if (!observing) return;
    const [lag, pending, ownedShards, memberEpoch, scheduled, deferred, parked, dueLag] = observing.instruments;
    const shards = target ? target.ownedShards() : [];
    result.observe(ownedShards, shards.length, this.member);
    result.observe(memberEpoch, target ? this.memberEpoch : 0, this.member);
    for (const shard of this.reportedShards) {
      if (shards.includes(shard)) continue;
      // Lost since the last collection: its new owner reports it now; this member's series ends at 0.
      for (const gauge of [lag, pending, scheduled, deferred, parked, dueLag]) result.observe(gauge, 0, this.shardAttributesOf(shard));
      this.reportedShards.delete(shard);
    }
    if (!target) {
      // Stopped: this was the last observation; the callback goes (not from inside its own call).
      setImmediate(() => {
        if (!this.target) this.unobserve();
      });
      return;
    }
    if (shards.length === 0) return;
    let positions: ShardPositions;
    try {
      positions = await this.readPositions(target, shards);
      this.positionsFailing = false;
    } catch (error) {
      // One 'error' per failure streak; the lag and pending series have a gap meanwhile (no stale value).
      if (!this.positionsFailing) {
        target.reportError(
          new Error(
            `member ${this.identity.memberId}: reading lag and pending for metrics failed: ${(error as Error).message}; the ${METRIC.lag}, ${METRIC.pending}, ${METRIC.scheduled}, ${METRIC.deferred}, ${METRIC.parked} and ${METRIC.dueLag} gauges skip its shards until a read succeeds`,
          ),
        );
      }
      this.positionsFailing = true;
      return;
    }
    for (const shard of shards) {
      const position = positions.get(shard);
      if (!position) continue;
      const attributes = this.shardAttributesOf(shard);
      this.reportedShards.add(shard);
      // Redis cannot always tell the lag (after deletions or trimming): no value rather than a wrong one.
      if (position.lag !== null) result.observe(lag, position.lag, attributes);
      result.observe(pending, position.pending, attributes);
      result.observe(scheduled, position.scheduled, attributes);
      result.observe(deferred, position.deferred, attributes);
      result.observe(parked, position.parked, attributes);
      result.observe(dueLag, position.dueLagMs / 1000, attributes);
    }
  };

  private readPositions(target: TelemetryTarget, shards: number[]): Promise<ShardPositions> {
    const now = performance.now();
    const cached = this.positions;
    if (cached && now - cached.at < POSITIONS_MIN_INTERVAL_MS) return cached.value;
    let timer: NodeJS.Timeout | undefined;
    const value = Promise.race([
      target.groupPositions(shards),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer within ${POSITIONS_TIMEOUT_MS} ms`)), POSITIONS_TIMEOUT_MS);
      }),
    ]).finally(() => clearTimeout(timer));
    this.positions = { at: now, value };
    // A failed read is not reused: the next collection tries again.
    value.catch(() => {
      if (this.positions?.value === value) this.positions = undefined;
    });
    return value;
  }

  private shardAttributesOf(shard: number): Attributes {
    let attributes = this.shardAttributes.get(shard);
    if (!attributes) {
      attributes = { ...this.member, [ATTR.partition]: String(shard) };
      this.shardAttributes.set(shard, attributes);
    }
    return attributes;
  }

  private withError(errorType: string, base: Attributes = this.base): Attributes {
    const key = base === this.base ? errorType : `member:${errorType}`;
    let attributes = this.errorAttributes.get(key);
    if (!attributes) {
      attributes = { ...base, [ATTR.errorType]: errorType };
      // Error names are a small set in practice; the cap keeps a handler throwing ad-hoc names from growing this without end.
      if (this.errorAttributes.size < 100) this.errorAttributes.set(key, attributes);
    }
    return attributes;
  }
}
