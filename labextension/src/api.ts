/**
 * The nbcast REST API (`/nbcast/api/v1`, documented at `/nbcast/api/v1/openapi.json`),
 * as the extension uses it. Every call goes through `ServerConnection.makeRequest`,
 * which adds the `X-XSRFToken` header from the `_xsrf` cookie (and the token, when Lab
 * has one), so the extension authenticates exactly as the page does.
 *
 * Types: the shapes the API answers with are generated from its OpenAPI components
 * (`./generated/api_types`, by `python -m nbcast.server_extension.typescript`); the
 * ones the form narrows (parameters, the `nbcast` block) are written here.
 *
 * Errors: the API answers `{"error": {"code", "message", "field"}}`; every failure
 * becomes an {@link ApiError} with that message and field (the dialog shows it next
 * to the field it names). A response that is not JSON (an HTML 404 page when the
 * server extension is not enabled, a proxy's error page) is an ApiError too, never a
 * JSON parse error.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import type { Block, ParameterSpec, PreviewRow } from './form/model';
import type * as schema from './generated/api_types';

export const API = 'nbcast/api/v1';

export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string,
    readonly field: string | null
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

const settings = (): ServerConnection.ISettings => ServerConnection.makeSettings();

/** The absolute URL of an nbcast path (API or page) on this server. */
export function nbcastUrl(path: string, query?: Record<string, string>): string {
  const base = URLExt.join(settings().baseUrl, path);
  if (!query) {
    return base;
  }
  return base + URLExt.objectToQueryString(query);
}

/** Call `path` under the API and decode its JSON answer. */
export async function requestAPI<T>(
  path: string,
  init: RequestInit = {},
  query?: Record<string, string>
): Promise<T> {
  const url = nbcastUrl(URLExt.join(API, path), query);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings());
  } catch (error) {
    throw new ApiError(`the server cannot be reached (${String(error)})`, 0, 'network', null);
  }
  const type = response.headers.get('Content-Type') ?? '';
  const text = await response.text();
  let data: any = null;
  if (type.includes('json') && text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!response.ok) {
    const error = data?.error;
    if (error && typeof error.message === 'string') {
      throw new ApiError(error.message, response.status, String(error.code), error.field ?? null);
    }
    const hint =
      response.status === 404
        ? ' — is the nbcast server extension enabled? (jupyter server extension list)'
        : '';
    throw new ApiError(
      `${response.status} ${response.statusText || 'error'}${hint}`,
      response.status,
      `http_${response.status}`,
      null
    );
  }
  if (data === null && text) {
    throw new ApiError('the server answered something other than JSON', response.status, 'bad_response', null);
  }
  return data as T;
}

const post = (body?: unknown): RequestInit => ({
  method: 'POST',
  body: body === undefined ? undefined : JSON.stringify(body)
});

// -- the shapes (see the OpenAPI document) ------------------------------------------------

export type UpcomingFire = schema.UpcomingFire;

export type Definition = schema.Definition;

export interface Page<T> {
  items: T[];
  next: string | null;
}

export interface Version {
  definition: string;
  version: number;
  sha256: string;
  author: string;
  message: string;
  created_at: string;
  parameters: ParameterSpec[];
  nbcast: Block;
}

/** One version with its definition's scheduler state (`GET /definitions/{name}`). */
export interface DefinitionDetail extends Version {
  latest_version: number;
  schedule: string;
  timezone: string;
  paused: boolean;
  next_fire_at: string | null;
  schedule_error: string | null;
  failures: number;
  last_run: Definition['last_run'];
  next_fires: UpcomingFire[];
}

export type RunError = schema.RunError;

export type Run = schema.Run;

export type Attempt = schema.Attempt;

export type Rendition = schema.Rendition;

export type Delivery = schema.Delivery;

export type RunDetail = schema.RunDetail;

export interface NotebookCheck {
  name: string | null;
  parameters: ParameterSpec[];
  problem: { field: string | null; message: string } | null;
  next_fires: UpcomingFire[];
  published: {
    name: string;
    latest_version: number;
    source_path: string;
    /** The definition is bound to this very file. */
    this_file: boolean;
    paused: boolean;
    same: boolean;
  } | null;
  channels: string[];
  /** The channels not configured where the server runs, each with what configures it. */
  unconfigured?: Record<string, string>;
  formats: string[];
  /** The zones a schedule may name; `timezone`: the asked-for zone as one of them. */
  zones: string[];
  timezone: string | null;
}

export interface Published {
  created: boolean;
  warnings: string[];
  definition: Definition;
  version: Version;
}

// -- the calls ----------------------------------------------------------------------------

const enc = encodeURIComponent;

export const api = {
  definitions: (limit = 500, after?: string) =>
    requestAPI<Page<Definition>>('definitions', {}, {
      limit: String(limit),
      ...(after ? { after } : {})
    }),
  /** Every definition of the tenant, page after page (at most `cap`). */
  async allDefinitions(cap = 10_000): Promise<Definition[]> {
    const all: Definition[] = [];
    let after: string | undefined;
    do {
      const page = await api.definitions(500, after);
      all.push(...page.items);
      // A page that brings nothing, or the same cursor again, ends the walk.
      after = page.items.length && page.next !== after ? (page.next ?? undefined) : undefined;
    } while (after && all.length < cap);
    return all;
  },
  definition: (name: string) => requestAPI<DefinitionDetail>(`definitions/${enc(name)}`),
  diffForNbdime: (name: string, a: number, b: number) =>
    requestAPI<{ base: unknown; diff: unknown[]; summary?: ReviewSummary }>(`definitions/${enc(name)}/diff`, {}, {
      a: String(a),
      b: String(b),
      format: 'nbdime'
    }),
  versions: (name: string) =>
    requestAPI<{ items: Version[] }>(`definitions/${enc(name)}/versions`),
  runs: (definition: string, limit = 50) =>
    requestAPI<Page<Run>>('runs', {}, { definition, limit: String(limit), order: 'desc' }),
  run: (id: number) => requestAPI<RunDetail>(`runs/${id}`),
  /** The executed notebook's JSON (served as `application/x-ipynb+json`). */
  runNotebook: (id: number) => requestAPI<Record<string, unknown>>(`runs/${id}/notebook`),
  check: (notebook: unknown, path: string, timezone?: string) =>
    requestAPI<NotebookCheck>(
      'notebooks/check',
      post({ notebook, path, ...(timezone ? { timezone } : {}) })
    ),
  publish: (path: string, message: string, name?: string) =>
    requestAPI<Published>('definitions', post({ path, message, ...(name ? { name } : {}) })),
  preview: (query: Record<string, string>) =>
    requestAPI<PreviewRow[]>('schedule/preview', {}, query),
  pause: (name: string) => requestAPI<unknown>(`definitions/${enc(name)}/pause`, post()),
  resume: (name: string) => requestAPI<unknown>(`definitions/${enc(name)}/resume`, post()),
  runNow: (name: string, parameters: Record<string, unknown>, test?: TestOptions) =>
    requestAPI<RunCreated>(
      `definitions/${enc(name)}/runs`,
      post({ ...(Object.keys(parameters).length ? { parameters } : {}), ...(test ? { test: true, ...test } : {}) })
    ),
  backfill: (name: string, from: string, until: string) =>
    requestAPI<{ slots: number; inserted: number; already_recorded: number }>(
      `definitions/${enc(name)}/backfill`,
      post({ from, until })
    ),
  cancel: (id: number) => requestAPI<{ state: string }>(`runs/${id}/cancel`, post()),
  retryDeliveries: (id: number) =>
    requestAPI<{ run: number; retried: number }>(`runs/${id}/deliveries/retry`, post())
};

/** What a test run is asked to do (none of it: a test run to the caller's own address). */
export type TestOptions = Pick<schema.DefinitionRunRequest, 'to' | 'slot' | 'as' | 'version'>;

/** What run now answers: the runs queued, and for test runs where they go. */
export type RunCreated = schema.DefinitionRunCreated;

/** What a version changes for recipients, before its code (the API's review summary). */
export type ReviewSummary = schema.ReviewSummary;

/** The status UI's page of a run's executed notebook (sandboxed HTML, framable by Lab). */
export const runNotebookPage = (id: number): string => nbcastUrl(`nbcast/runs/${id}/notebook.html`);

/** A rendition, shown in the browser (HTML sandboxed) rather than saved. */
export const renditionUrl = (run: number, rendition: number): string =>
  nbcastUrl(`${API}/runs/${run}/renditions/${rendition}`, { disposition: 'inline' });

/** Two runs' reports compared, as the server renders it (script-free). */
export const comparePage = (a: number, b: number): string =>
  nbcastUrl(`${API}/runs/${a}/diff/${b}`, { format: 'html' });

/** nbdime's rendering of the diff of two versions, as the server makes it (script-free). */
export const diffPage = (name: string, a: number, b: number): string =>
  nbcastUrl(`${API}/definitions/${enc(name)}/diff`, { a: String(a), b: String(b), format: 'html' });
