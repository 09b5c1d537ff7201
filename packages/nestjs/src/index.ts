export { CoordinatorModule } from './coordinator.module';
export { COORDINATOR_MODULE_OPTIONS } from './coordinator.module-definition';
export type { CoordinatorModuleExtras, CoordinatorModuleOptions, MemberDefaults } from './coordinator-module-options';
export { StreamListener, type StreamListenerOptions } from './stream-listener.decorator';
export {
  type ConsumerPlacement,
  type CoordinatorBatchConsumerOptions,
  CoordinatorConsumerProperties,
  type CoordinatorConsumerOptions,
} from './coordinator-consumer-properties';
export { type PublisherCodec, type PublishOptions, StreamPublisher } from './stream-publisher';
export { CoordinatorRegistry, type RegisteredMember } from './coordinator.registry';
export { StreamListenerRegistry, type RuntimeListenerOptions } from './stream-listener.registry';
export { StreamListenerContainer, type StreamListenerKind, MAX_LISTENER_CONCURRENCY } from './stream-listener.container';
export {
  CoordinatorHealthIndicator,
  type CoordinatorHealth,
  type CoordinatorLiveness,
  type ConnectionHealth,
  type MemberHealth,
} from './coordinator.health';
export { COORDINATOR_CONNECTION, DEFAULT_CONNECTION_NAME } from './coordinator.constants';
export {
  getCoordinatorAdminToken,
  getCoordinatorConnectionToken,
  getStreamPublisherToken,
  InjectCoordinatorAdmin,
  InjectStreamPublisher,
} from './coordinator.tokens';
export { CoordinatorConnection, type PingResult } from './coordinator-connection';
export { CoordinatorConnections } from './coordinator-connections';
export { STREAM_CONTEXT_TYPE, StreamContext, type StreamContextMember, type StreamContextType } from './stream-context';
export { StreamCtx, StreamParamsFactory, StreamParamtype, StreamPayload } from './stream-params.decorators';
export { StreamHandlerFactory, type MemberHandler } from './stream-handler.factory';
export {
  AckRefusedError,
  BatchError,
  CoordinatorAdmin,
  HandlerAbortedError,
  type HandlerAbortReason,
  jsonCodec,
  msgpackCodec,
  type PayloadCodec,
  type StreamMessage,
} from '@redis-stream-coordinator/core';
