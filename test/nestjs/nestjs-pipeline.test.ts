import 'reflect-metadata';
import {
  type ArgumentsHost,
  BadRequestException,
  type CallHandler,
  type CanActivate,
  Catch,
  type ExceptionFilter,
  type ExecutionContext,
  ForbiddenException,
  Injectable,
  Module,
  type NestInterceptor,
  type PipeTransform,
  UseFilters,
  UseGuards,
  UseInterceptors,
  UsePipes,
} from '@nestjs/common';
import { APP_FILTER, APP_GUARD, APP_INTERCEPTOR, ExternalContextCreator } from '@nestjs/core';
import { Test, type TestingModule } from '@nestjs/testing';
import { throwError, tap } from 'rxjs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { BatchError, CoordinatorAdmin, type DeadLetterNotice, type StreamMessage } from '@redis-stream-coordinator/core';
import {
  CoordinatorConsumerProperties,
  CoordinatorHealthIndicator,
  CoordinatorModule,
  CoordinatorRegistry,
  STREAM_CONTEXT_TYPE,
  StreamContext,
  StreamCtx,
  StreamListener,
  StreamPayload,
  StreamPublisher,
} from '@redis-stream-coordinator/nestjs';
import { closedAfterEach, quietLogger } from '../support/nest-apps';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const apps = closedAfterEach<TestingModule>();
const quiet = quietLogger;

afterEach(() => {
  vi.restoreAllMocks();
});

type Summary = { text: string };

/** An app with one CoordinatorModule (2 tries per entry, fast retries) and the given providers, joined. */
async function anApp(providers: unknown[]) {
  @Module({ providers: providers as never[] })
  class FeatureModule {}
  const app = await Test.createTestingModule({
    imports: [
      CoordinatorModule.forRoot({
        redis: { url: redis.server.url },
        coordinator: { heartbeatIntervalMs: 200 },
        defaults: { maxAttempts: 2, retryBackoffMs: 10 },
      }),
      FeatureModule,
    ],
  })
    .setLogger(quiet)
    .compile();
  apps.push(app);
  await app.init();
  const outcome = { acknowledged: new Set<string>(), deadLetters: [] as { id: string; reason: string; attempts: number }[] };
  for (const member of app.get(CoordinatorRegistry).members()) {
    member.on('acknowledged', (event) => {
      if (event.accepted) for (const id of event.ids) outcome.acknowledged.add(id);
    });
    member.on('dead-letter', (event) => outcome.deadLetters.push(event));
  }
  await pollUntil('members joined', async () => (await app.get(CoordinatorHealthIndicator).check()).coordinator.status === 'up');
  const publish = (payload: Summary, headers: Record<string, string> = {}) =>
    app.get(StreamPublisher).publish(streamPrefixOf(app), { key: 'user-42', payload, headers });
  return { app, outcome, publish };
}

const streamPrefixOf = (app: TestingModule) => app.get(CoordinatorRegistry).members()[0].options.streamPrefix;

const listen = (streamPrefix: string) => StreamListener({ streamPrefix, consumerGroup: 'g', shardCount: 2 });

describe("a @StreamListener runs inside Nest's pipeline", () => {
  it("global, class and method guards and interceptors run in Nest's order, with the context type, getData() and getContext()", async () => {
    const streamPrefix = uniqueName('pipeline');
    const calls: string[] = [];
    const contexts: { type: string; data: unknown; context: unknown }[] = [];
    const guard = (name: string) => {
      @Injectable()
      class Guard implements CanActivate {
        canActivate(context: ExecutionContext) {
          calls.push(`${name} guard`);
          const rpc = context.switchToRpc();
          contexts.push({ type: context.getType(), data: rpc.getData(), context: rpc.getContext() });
          return true;
        }
      }
      return Guard;
    };
    const interceptor = (name: string) => {
      @Injectable()
      class Interceptor implements NestInterceptor {
        intercept(_context: ExecutionContext, next: CallHandler) {
          calls.push(`${name} interceptor before`);
          return next.handle().pipe(tap(() => calls.push(`${name} interceptor after`)));
        }
      }
      return Interceptor;
    };
    class Shout implements PipeTransform<Summary, Summary> {
      transform(value: Summary) {
        return { text: value.text.toUpperCase() };
      }
    }
    const received: { payload: Summary; text: string; context: StreamContext }[] = [];
    @Injectable()
    @UseGuards(guard('class'))
    class Handlers {
      @listen(streamPrefix)
      @UseGuards(guard('method'))
      @UseInterceptors(interceptor('method'))
      handle(@StreamPayload(Shout) payload: Summary, @StreamCtx() context: StreamContext, @StreamPayload('text') text: string) {
        calls.push('handler');
        received.push({ payload, text, context });
      }
    }
    const { app, outcome, publish } = await anApp([
      Handlers,
      { provide: APP_GUARD, useClass: guard('global') },
      { provide: APP_INTERCEPTOR, useClass: interceptor('global') },
    ]);
    const sent = await publish({ text: 'hi' }, { traceId: 't-1' });
    await pollUntil('the entry acknowledged', async () => outcome.acknowledged.has(sent.id));

    expect(calls).toEqual([
      'global guard',
      'class guard',
      'method guard',
      'global interceptor before',
      'method interceptor before',
      'handler',
      'method interceptor after',
      'global interceptor after',
    ]);
    expect(contexts.map((c) => c.type)).toEqual([STREAM_CONTEXT_TYPE, STREAM_CONTEXT_TYPE, STREAM_CONTEXT_TYPE]);
    expect(contexts[0].data).toEqual({ text: 'hi' }); // the payload, before any pipe
    expect(contexts[0].context).toBe(received[0].context);
    const [{ payload, text, context }] = received;
    expect(payload).toEqual({ text: 'HI' });
    expect(text).toBe('hi');
    const [member] = app.get(CoordinatorRegistry).members();
    expect(context).toBeInstanceOf(StreamContext);
    expect(context).toMatchObject({
      id: sent.id,
      streamPrefix,
      shardIndex: sent.shardIndex,
      key: 'user-42',
      headers: { traceId: 't-1' },
      deliveryCount: 1,
      consumerGroup: 'g',
      memberId: member.memberId,
      memberEpoch: member.currentMemberEpoch(),
    });
    expect(context.memberEpoch).toBeGreaterThan(0);
    expect(context.message.payload).toEqual({ text: 'hi' });
    expect(outcome.deadLetters).toEqual([]);
  });

  it('a handler without parameter decorators still receives the whole StreamMessage inside the pipeline; class pipes apply to it', async () => {
    const streamPrefix = uniqueName('undecorated');
    const calls: string[] = [];
    const received: StreamMessage<Summary>[] = [];
    class Stamp implements PipeTransform<StreamMessage<Summary>, StreamMessage<Summary>> {
      transform(value: StreamMessage<Summary>) {
        calls.push('pipe');
        return value;
      }
    }
    @Injectable()
    class LoggingInterceptor implements NestInterceptor {
      intercept(_context: ExecutionContext, next: CallHandler) {
        calls.push('interceptor');
        return next.handle();
      }
    }
    @Injectable()
    @UseInterceptors(LoggingInterceptor)
    @UsePipes(Stamp)
    class Handlers {
      @listen(streamPrefix)
      handle(message: StreamMessage<Summary>) {
        received.push(message);
      }
    }
    const { outcome, publish } = await anApp([Handlers]);
    const sent = await publish({ text: 'whole' });
    await pollUntil('the entry acknowledged', async () => outcome.acknowledged.has(sent.id));
    expect(calls).toEqual(['interceptor', 'pipe']);
    expect(received).toEqual([expect.objectContaining({ id: sent.id, key: 'user-42', payload: { text: 'whole' }, deliveryCount: 1 })]);
  });

  it('a handler with no enhancer anywhere and no parameter decorator is called directly, outside the pipeline', async () => {
    const create = vi.spyOn(ExternalContextCreator.prototype, 'create');
    const streamPrefix = uniqueName('direct');
    const received: StreamMessage[] = [];
    @Injectable()
    class Handlers {
      @listen(streamPrefix)
      handle(message: StreamMessage) {
        received.push(message);
      }
    }
    const { outcome, publish } = await anApp([Handlers]);
    const sent = await publish({ text: 'fast' });
    await pollUntil('the entry acknowledged', async () => outcome.acknowledged.has(sent.id));
    expect(received.map((m) => m.id)).toEqual([sent.id]);
    expect(create).not.toHaveBeenCalled();
  });
});

describe('a bean consumer that names a provider method', () => {
  it('runs it through the pipeline: the class interceptor and the parameter decorators apply', async () => {
    const streamPrefix = uniqueName('bean');
    const calls: string[] = [];
    @Injectable()
    class Audit implements NestInterceptor {
      intercept(context: ExecutionContext, next: CallHandler) {
        calls.push(`interceptor ${context.getType()} ${context.getClass().name}.${context.getHandler().name}`);
        return next.handle();
      }
    }
    @Injectable()
    @UseInterceptors(Audit)
    class AuditService {
      handle(@StreamPayload('text') text: string, @StreamCtx() context: StreamContext) {
        calls.push(`handle ${text} ${context.key}`);
      }
    }
    const bean = {
      provide: 'auditConsumer',
      inject: [AuditService],
      useFactory: (audit: AuditService) =>
        CoordinatorConsumerProperties.consumer({
          streamPrefix,
          consumerGroup: 'g',
          shardCount: 2,
          handler: CoordinatorConsumerProperties.providerMethod(audit, 'handle'),
        }),
    };
    const { outcome, publish } = await anApp([AuditService, bean]);
    const sent = await publish({ text: 'audited' });
    await pollUntil('the entry acknowledged', async () => outcome.acknowledged.has(sent.id));
    expect(calls).toEqual([`interceptor ${STREAM_CONTEXT_TYPE} AuditService.handle`, 'handle audited user-42']);
  });

  it('a name that is not a method of the provider is an error naming it', () => {
    expect(() => CoordinatorConsumerProperties.providerMethod({ handle: 1 } as never, 'handle')).toThrow(
      /"handle" is not a method of Object/,
    );
  });
});

describe('what an enhancer decides for the entry', () => {
  @Injectable()
  class Refuse implements CanActivate {
    static calls = 0;
    canActivate() {
      Refuse.calls += 1;
      return false;
    }
  }

  it('a guard that says no, with no filter: the handler never runs, the entry is retried and then dead-lettered as ForbiddenException', async () => {
    const streamPrefix = uniqueName('refused');
    Refuse.calls = 0;
    const handled: string[] = [];
    @Injectable()
    class Handlers {
      @listen(streamPrefix)
      @UseGuards(Refuse)
      handle(@StreamCtx() context: StreamContext) {
        handled.push(context.id);
      }
    }
    const { outcome, publish } = await anApp([Handlers]);
    const sent = await publish({ text: 'no' });
    const [deadLetter] = await pollUntil('the entry dead-lettered', async () => outcome.deadLetters.length > 0 && outcome.deadLetters);
    expect(deadLetter).toMatchObject({ id: sent.id, attempts: 2, reason: expect.stringMatching(/^ForbiddenException: /) });
    expect(Refuse.calls).toBe(2); // asked again on the retry
    expect(handled).toEqual([]);
  });

  it('a guard that says no and a filter that returns a value: the entry is acknowledged as skipped, not retried or dead-lettered', async () => {
    const streamPrefix = uniqueName('skipped');
    Refuse.calls = 0;
    const handled: string[] = [];
    const skipped: string[] = [];
    @Catch(ForbiddenException)
    class SkipRefused implements ExceptionFilter {
      catch(_exception: ForbiddenException, host: ArgumentsHost) {
        skipped.push(host.switchToRpc().getContext<StreamContext>().id);
        return 'skipped';
      }
    }
    @Injectable()
    class Handlers {
      @listen(streamPrefix)
      @UseGuards(Refuse)
      @UseFilters(SkipRefused)
      handle(@StreamCtx() context: StreamContext) {
        handled.push(context.id);
      }
    }
    const { outcome, publish } = await anApp([Handlers]);
    const sent = await publish({ text: 'skip me' });
    await pollUntil('the entry acknowledged', async () => outcome.acknowledged.has(sent.id));
    expect(skipped).toEqual([sent.id]);
    expect(Refuse.calls).toBe(1);
    expect(handled).toEqual([]);
    expect(outcome.deadLetters).toEqual([]);
  });

  it('a global filter that returns a value handles what the handler threw: acknowledged after one call', async () => {
    const streamPrefix = uniqueName('handled');
    const calls: string[] = [];
    @Catch()
    class Handled implements ExceptionFilter {
      catch(exception: Error) {
        calls.push(`filter ${exception.message}`);
        return { handled: true };
      }
    }
    @Injectable()
    class Handlers {
      @listen(streamPrefix)
      handle(@StreamPayload() summary: Summary) {
        calls.push('handler');
        throw new Error(`cannot summarise ${summary.text}`);
      }
    }
    const { outcome, publish } = await anApp([Handlers, { provide: APP_FILTER, useClass: Handled }]);
    const sent = await publish({ text: 'boom' });
    await pollUntil('the entry acknowledged', async () => outcome.acknowledged.has(sent.id));
    expect(calls).toEqual(['handler', 'filter cannot summarise boom']);
    expect(outcome.deadLetters).toEqual([]);
  });

  it.each([
    ['returns nothing', () => undefined],
    ['returns an error observable (RPC style)', (exception: Error) => throwError(() => exception)],
  ])('a class filter that %s does not handle: the entry is retried and then dead-lettered', async (_name, answer) => {
    const streamPrefix = uniqueName('unhandled');
    let filtered = 0;
    @Catch()
    class NotHandled implements ExceptionFilter {
      catch(exception: Error) {
        filtered += 1;
        return answer(exception);
      }
    }
    @Injectable()
    @UseFilters(NotHandled)
    class Handlers {
      @listen(streamPrefix)
      handle() {
        throw new Error('still failing');
      }
    }
    const { outcome, publish } = await anApp([Handlers]);
    const sent = await publish({ text: 'x' });
    const [deadLetter] = await pollUntil('the entry dead-lettered', async () => outcome.deadLetters.length > 0 && outcome.deadLetters);
    expect(deadLetter).toMatchObject({ id: sent.id, attempts: 2, reason: 'Error: still failing' });
    expect(filtered).toBe(2);
    expect(outcome.acknowledged.has(sent.id)).toBe(true); // dead-lettered entries are acknowledged in their shard
  });

  it("a pipe that rejects the payload: the handler never runs, the entry is dead-lettered with the pipe's exception", async () => {
    const streamPrefix = uniqueName('invalid');
    const handled: Summary[] = [];
    class RequireText implements PipeTransform<unknown, Summary> {
      transform(value: unknown) {
        if (typeof (value as Summary)?.text !== 'string') throw new BadRequestException('text must be a string');
        return value as Summary;
      }
    }
    @Injectable()
    class Handlers {
      @listen(streamPrefix)
      handle(@StreamPayload(RequireText) summary: Summary) {
        handled.push(summary);
      }
    }
    const { outcome, publish } = await anApp([Handlers]);
    const sent = await publish({ wrong: true } as never);
    const [deadLetter] = await pollUntil('the entry dead-lettered', async () => outcome.deadLetters.length > 0 && outcome.deadLetters);
    expect(deadLetter).toMatchObject({ id: sent.id, reason: 'BadRequestException: text must be a string' });
    expect(handled).toEqual([]);
  });

  it("the module's defaults.deadLetter and a listener's own merge field by field: a pipe's exception listed as non-retryable goes to the listener's destination at once", async () => {
    const streamPrefix = uniqueName('nonretry');
    const notices: DeadLetterNotice[] = [];
    class RequireText implements PipeTransform<unknown, Summary> {
      transform(value: unknown) {
        if (typeof (value as Summary)?.text !== 'string') throw new BadRequestException('text must be a string');
        return value as Summary;
      }
    }
    @Injectable()
    class Handlers {
      @StreamListener({ streamPrefix, consumerGroup: 'g', shardCount: 2, deadLetter: { stream: 'summary-dlq' } })
      handle(@StreamPayload(RequireText) summary: Summary) {
        return summary;
      }
    }
    @Module({ providers: [Handlers] })
    class FeatureModule {}
    const app = await Test.createTestingModule({
      imports: [
        CoordinatorModule.forRoot({
          redis: { url: redis.server.url },
          coordinator: { heartbeatIntervalMs: 200 },
          defaults: {
            maxAttempts: 5,
            retryBackoffMs: 10,
            deadLetter: { nonRetryableErrors: [BadRequestException], onDeadLetter: (notice) => notices.push(notice) },
          },
        }),
        FeatureModule,
      ],
    })
      .setLogger(quiet)
      .compile();
    apps.push(app);
    await app.init();
    const [member] = app.get(CoordinatorRegistry).members();
    expect(member.options.deadLetter.stream).toBe('summary-dlq');
    await pollUntil('members joined', async () => (await app.get(CoordinatorHealthIndicator).check()).coordinator.status === 'up');
    const sent = await app.get(StreamPublisher).publish(streamPrefix, { key: 'user-42', payload: { wrong: true } });

    const [notice] = await pollUntil('the hook ran', async () => notices.length > 0 && notices);
    expect(notice).toMatchObject({
      entryId: sent.id,
      destination: 'summary-dlq',
      cause: 'non-retryable',
      attempts: 1,
      reason: 'BadRequestException: text must be a string',
    });
    const letters = await app.get(CoordinatorAdmin).readDeadLetters(streamPrefix, 'summary-dlq');
    expect(letters.map((l) => [l.entryId, l.consumerGroup, l.cause])).toEqual([[sent.id, 'g', 'non-retryable']]);
  });
});

describe('batch listeners in the pipeline', () => {
  it('the data is the payloads, StreamContext.batch the messages, an interceptor sees the batch once; a BatchError fails from its entry on', async () => {
    const streamPrefix = uniqueName('batch-pipe');
    const seen: { payloads: Summary[]; ids: string[]; first: string }[] = [];
    const intercepted: number[] = [];
    @Injectable()
    class CountBatches implements NestInterceptor {
      intercept(context: ExecutionContext, next: CallHandler) {
        intercepted.push((context.switchToRpc().getData() as unknown[]).length);
        return next.handle();
      }
    }
    @Injectable()
    class Handlers {
      @StreamListener({ streamPrefix, consumerGroup: 'g', shardCount: 1, batch: { maxSize: 10, maxWaitMs: 300 } })
      @UseInterceptors(CountBatches)
      onBatch(@StreamPayload() payloads: Summary[], @StreamCtx() context: StreamContext) {
        seen.push({ payloads, ids: context.batch!.map((m) => m.id), first: context.id });
        const bad = payloads.findIndex((p) => p.text === 'bad');
        if (bad >= 0) throw new BatchError(bad, new Error('bad text'));
      }
    }
    const { app, outcome } = await anApp([Handlers, CountBatches]);
    const sent = await app.get(StreamPublisher).publishBatch(
      streamPrefix,
      ['a', 'b', 'bad', 'c'].map((text) => ({ key: 'k', payload: { text } })),
    );
    await pollUntil('the bad entry dead-lettered', async () => outcome.deadLetters.length === 1);
    expect(seen[0]).toEqual({ payloads: ['a', 'b', 'bad', 'c'].map((text) => ({ text })), ids: sent.map((s) => s.id), first: sent[0].id });
    // maxAttempts 2: the tail from 'bad' once more, then 'bad' dead-lettered and 'c' alone.
    expect(seen.map((s) => s.payloads.map((p) => p.text))).toEqual([['a', 'b', 'bad', 'c'], ['bad', 'c'], ['c']]);
    expect(intercepted).toEqual([4, 2, 1]);
    expect(outcome.deadLetters[0]).toMatchObject({ id: sent[2].id, attempts: 2, reason: 'Error: bad text' });
    await pollUntil('the rest acknowledged', async () => [sent[0], sent[1], sent[3]].every((s) => outcome.acknowledged.has(s.id)));
  });
});
