import { Injectable } from '@nestjs/common';
import {
  EXCEPTION_FILTERS_METADATA,
  GUARDS_METADATA,
  INTERCEPTORS_METADATA,
  PIPES_METADATA,
  ROUTE_ARGS_METADATA,
} from '@nestjs/common/constants';
import { ApplicationConfig, ExternalContextCreator } from '@nestjs/core';
import type { CoordinatedMember, StreamMessage } from '@redis-stream-coordinator/core';
import { isObservable, lastValueFrom } from 'rxjs';
import { STREAM_CONTEXT_TYPE, StreamContext } from './stream-context';
import { StreamParamsFactory, StreamParamtype } from './stream-params.decorators';

/**
 * Where the implicit "first parameter is the StreamMessage" of a handler without parameter
 * decorators is stored: a key of this package, so it never mixes with the route arguments of the
 * class (an HTTP controller may also be a listener).
 */
const IMPLICIT_ARGS_METADATA = 'redis-stream-coordinator:implicit-handler-args';
const ENHANCER_METADATA = [GUARDS_METADATA, INTERCEPTORS_METADATA, PIPES_METADATA, EXCEPTION_FILTERS_METADATA];

/** A handler as a member runs it: the entry, and the member (for the StreamContext's member id and epoch). */
export type MemberHandler = (message: StreamMessage, member: CoordinatedMember) => unknown;

type Method = (...args: unknown[]) => unknown;

/**
 * Turns a provider method into a member's handler that runs through Nest's pipeline, the way
 * `@nestjs/graphql` wraps resolvers: ExternalContextCreator composes the guards, interceptors, pipes
 * and exception filters of the method, its class and the application, with the context type
 * `'rsc'` and the arguments `[payload, StreamContext]` (`switchToRpc().getData()` / `getContext()`).
 *
 * What a handler's outcome means for the entry (the core acknowledges what resolves, retries in place
 * and then dead-letters what throws):
 * - the method (or an interceptor) returns or resolves: handled, acknowledged;
 * - it throws, a pipe rejects the payload, or a guard says no (Nest's ForbiddenException): the
 *   exception goes to the exception filters first;
 * - a filter that returns a value (a promise or observable is awaited) handled the exception: the
 *   entry is acknowledged, so a filter is how a guard's "no" becomes "skip this entry";
 * - a filter that returns nothing, rethrows, or an exception no filter catches: the attempt failed,
 *   so the entry is retried in place (guards and pipes run again) and then dead-lettered with the
 *   exception as its reason. Nest's ExceptionsHandler logs such an exception once per attempt.
 *
 * A method with no enhancer anywhere (method, class, global) and no parameter decorator is called
 * directly, as before: the pipeline costs nothing where nothing uses it, and a synchronous handler
 * stays synchronous.
 */
@Injectable()
export class StreamHandlerFactory {
  private readonly paramsFactory = new StreamParamsFactory();

  constructor(
    private readonly contextCreator: ExternalContextCreator,
    private readonly config: ApplicationConfig,
  ) {}

  create(instance: object, methodName: string): MemberHandler {
    const method = (instance as Record<string, Method>)[methodName];
    const classRef = instance.constructor;
    const hasParamDecorators = Reflect.getMetadata(ROUTE_ARGS_METADATA, classRef, methodName) !== undefined;
    if (!hasParamDecorators && !this.hasEnhancers(classRef, method)) {
      return (message) => method.call(instance, message);
    }
    let metadataKey = ROUTE_ARGS_METADATA;
    if (!hasParamDecorators) {
      // Keeps `onSummary(message: StreamMessage)` working inside the pipeline: without it, Nest would
      // call the method with the raw arguments, the payload first.
      metadataKey = IMPLICIT_ARGS_METADATA;
      if (!Reflect.hasMetadata(IMPLICIT_ARGS_METADATA, classRef, methodName)) {
        Reflect.defineMetadata(
          IMPLICIT_ARGS_METADATA,
          { [`${StreamParamtype.MESSAGE}:0`]: { index: 0, data: undefined, pipes: [] } },
          classRef,
          methodName,
        );
      }
    }
    const invoke = this.contextCreator.create(
      instance,
      method,
      methodName,
      metadataKey,
      this.paramsFactory,
      undefined,
      undefined,
      { guards: true, interceptors: true, filters: true },
      STREAM_CONTEXT_TYPE,
    );
    return async (message, member) => {
      // A batch listener (`batch`) gets an array: the data is the payloads, the context the batch's.
      const batch = Array.isArray(message) ? (message as StreamMessage[]) : undefined;
      const context = new StreamContext(
        batch ? batch[0] : message,
        { memberId: member.memberId, consumerGroup: member.options.consumerGroup, memberEpoch: member.currentMemberEpoch() },
        batch,
      );
      const result: unknown = await invoke(batch ? batch.map((m) => m.payload) : message.payload, context);
      // An exception filter's answer is passed through as it is: an RPC-style filter answers with an
      // observable (throwError to fail), which decides the entry's fate only once subscribed.
      if (isObservable(result)) await lastValueFrom(result, { defaultValue: undefined });
    };
  }

  /** Whether any guard, interceptor, pipe or exception filter applies to the method. */
  private hasEnhancers(classRef: object, method: Method): boolean {
    const local = ENHANCER_METADATA.some(
      (key) => hasItems(Reflect.getMetadata(key, method)) || hasItems(Reflect.getMetadata(key, classRef)),
    );
    if (local) return true;
    const config = this.config;
    return (
      config.getGlobalGuards().length +
        config.getGlobalInterceptors().length +
        config.getGlobalPipes().length +
        config.getGlobalFilters().length +
        config.getGlobalRequestGuards().length +
        config.getGlobalRequestInterceptors().length +
        config.getGlobalRequestPipes().length +
        config.getGlobalRequestFilters().length >
      0
    );
  }
}

function hasItems(value: unknown): boolean {
  return Array.isArray(value) && value.length > 0;
}
