/**
 * Why an entry went to the dead letters, as written in its dead letter's `cause` field: it could
 * not be decoded, its payload did not match the member's `schema`, every attempt failed, or its handler failed with an error the member's
 * `deadLetter.nonRetryable` / `nonRetryableErrors` says is not worth retrying (at its first failure).
 */
export type DeadLetterCause = 'undecodable' | 'invalid' | 'attempts-exhausted' | 'non-retryable';

export const DEAD_LETTER_CAUSES: readonly DeadLetterCause[] = ['undecodable', 'invalid', 'attempts-exhausted', 'non-retryable'];
