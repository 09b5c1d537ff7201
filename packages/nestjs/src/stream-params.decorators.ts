import type { ParamData, PipeTransform, Type } from '@nestjs/common';
import { ROUTE_ARGS_METADATA } from '@nestjs/common/constants';
import type { ParamsFactory } from '@nestjs/core';
import type { StreamContext } from './stream-context';

/**
 * The parameter kinds of a stream handler. Stored under Nest's own route-arguments metadata key, as
 * `@nestjs/microservices` and `@nestjs/graphql` do, so `createParamDecorator` decorators work on
 * stream handlers too.
 */
export enum StreamParamtype {
  PAYLOAD = 3,
  CONTEXT = 6,
  /** The whole StreamMessage: what a handler without any parameter decorator receives as its first argument. */
  MESSAGE = 101,
}

type PipeLike = Type<PipeTransform> | PipeTransform;

function streamParam(type: StreamParamtype, data: string | undefined, pipes: PipeLike[]): ParameterDecorator {
  return (target, key, index) => {
    if (key === undefined) throw new TypeError('stream parameter decorators apply to method parameters, not to constructor parameters');
    const args = (Reflect.getMetadata(ROUTE_ARGS_METADATA, target.constructor, key) ?? {}) as Record<string, unknown>;
    Reflect.defineMetadata(ROUTE_ARGS_METADATA, { ...args, [`${type}:${index}`]: { index, data, pipes } }, target.constructor, key);
  };
}

/**
 * Injects the entry's decoded payload (or one property of it) into a `@StreamListener` method,
 * through the given pipes and the class, method and global ones, like `@Payload()` of
 * `@nestjs/microservices`.
 *
 * @example
 * @StreamListener({ streamPrefix: 'summary', consumerGroup: 'summary-group' })
 * onSummary(@StreamPayload(SummaryValidationPipe) summary: Summary, @StreamCtx() context: StreamContext) {}
 */
export function StreamPayload(...pipes: PipeLike[]): ParameterDecorator;
export function StreamPayload(property: string, ...pipes: PipeLike[]): ParameterDecorator;
export function StreamPayload(propertyOrPipe?: string | PipeLike, ...pipes: PipeLike[]): ParameterDecorator {
  if (typeof propertyOrPipe === 'string' || propertyOrPipe === undefined)
    return streamParam(StreamParamtype.PAYLOAD, propertyOrPipe, pipes);
  return streamParam(StreamParamtype.PAYLOAD, undefined, [propertyOrPipe, ...pipes]);
}

/**
 * Injects the StreamContext of the entry (id, key, shard, delivery count, headers, member id and
 * epoch), like `@Ctx()` of `@nestjs/microservices`.
 */
export function StreamCtx(): ParameterDecorator {
  return streamParam(StreamParamtype.CONTEXT, undefined, []);
}

/** Gives each parameter its value from the handler's arguments: `[payload, streamContext]`. */
export class StreamParamsFactory implements ParamsFactory {
  exchangeKeyForValue(type: number, data: ParamData, args: [unknown, StreamContext]): unknown {
    switch (type) {
      case StreamParamtype.PAYLOAD:
        return data === undefined ? args[0] : (args[0] as Record<string, unknown> | null | undefined)?.[data as string];
      case StreamParamtype.CONTEXT:
        return args[1];
      case StreamParamtype.MESSAGE:
        return args[1].batch ?? args[1].message;
      default:
        return undefined;
    }
  }
}
