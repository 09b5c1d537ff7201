/** Metadata key of @StreamListener (one namespace for everything this package stores). */
export const STREAM_LISTENER_METADATA = 'redis-stream-coordinator:stream-listener';
/** Injection token of the unnamed module's Redis connection (a CoordinatorConnection). */
export const COORDINATOR_CONNECTION = 'REDIS_STREAM_COORDINATOR_CONNECTION';
/** The name of the connection of a `forRoot` without `name`, and of a listener without `connection`. */
export const DEFAULT_CONNECTION_NAME = 'default';
/** Injection token, local to each CoordinatorModule, of its options. */
export const COORDINATOR_MODULE_OPTIONS = 'REDIS_STREAM_COORDINATOR_MODULE_OPTIONS';
