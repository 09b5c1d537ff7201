/** The demo's event: a user's summary, keyed by user, so one user's summaries stay in order. */
export interface Summary {
  userId: string;
  text: string;
  at: string;
}

export const SUMMARY_STREAM = 'summary';
export const SUMMARY_GROUP = 'summary-group';
export const AUDIT_GROUP = 'audit-group';
