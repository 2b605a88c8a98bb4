/** Log line formats (kept apart from logging.ts so the CLI can name them without loading pino). */
export type LogFormat = 'json' | 'text';
/** Allowed values of a log format option. */
export const LOG_FORMATS: readonly LogFormat[] = ['json', 'text'];
