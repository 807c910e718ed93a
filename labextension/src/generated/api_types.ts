// Generated from the REST API's OpenAPI components by
// `python -m nbcast.server_extension.typescript`; do not edit.

/** Choices, bounds or a pattern a parameter's values must meet. */
export interface AllowedValues {
  /** The values it may take. */
  choices: Record<string, unknown>[] | null;
  /** The smallest number it may be. */
  min: number | null;
  /** The largest number it may be. */
  max: number | null;
  /** A regular expression the whole string must match. */
  pattern: string | null;
}

/** One attempt at a run: who ran it, where, for how long, and how it ended. */
export interface Attempt {
  attempt: number;
  /** An `Outcome`; None while it runs. */
  outcome: string | null;
  worker: string;
  host: string;
  engine: string;
  started_at: string;
  ended_at: string | null;
  duration_s: number | null;
  kernel_start_s: number | null;
  /** Its executed notebook (kept for failures too). */
  artifact_sha256: string | null;
  error: RunError | null;
}

export interface AuditCheck {
  intact: boolean;
  entries: number;
  broken: null | {
    seq: number;
    problem: string;
  };
}

/** One entry of the tenant's hash-chained audit log (one line of `nbcast audit export`). */
export interface AuditEntry {
  tenant: string;
  seq: number;
  at: string;
  actor: string;
  action: "definition.published" | "schedule.changed" | "definition.paused" | "definition.resumed" | "run.requested" | "run.rerun" | "backfill.requested" | "run.cancel_requested" | "deliveries.retried" | "tenant.created" | "quota.changed" | "ceilings.changed" | "network.changed" | "budget.changed" | "retention.changed" | "user.added" | "role.granted" | "role.revoked" | "operator.granted" | "operator.revoked" | "link.created" | "link.opened" | "link.revoked" | "subscription.unsubscribed" | "delivery.sent" | "delivery.failed" | "delivery.suppressed" | "retention.deleted" | "sla.missed";
  object: string;
  details: Record<string, unknown>;
  prev_hash: string;
  hash: string;
}

export interface AuditPage {
  items: AuditEntry[];
  next: string | null;
}

export interface CancelResult {
  run_id: number;
  state: "QUEUED" | "LEASED" | "RUNNING" | "SUCCEEDED" | "FAILED" | "TIMED_OUT" | "CANCELLED" | "SKIPPED" | "MISSED";
  cancel: "requested";
  requested_at: string;
  requested_by: string;
  already_requested?: boolean;
  next?: string;
}

/** A definition as listed: its latest version's schedule and the scheduler's view of it. */
export interface Definition {
  name: string;
  latest_version: number;
  /** '<cron or every …> (<zone>)' or 'manual'. */
  schedule: string;
  cron: string | null;
  every: string | null;
  timezone: string;
  /** The file the definition is bound to, relative to the server's root folder ('outside-root:<file name>' for one outside it), or 'api:<name>' for a notebook published as JSON; never an absolute path of the server. */
  source_path: string;
  created_at: string;
  updated_at: string;
  paused: boolean;
  next_fire_at: string | null;
  /** Why the scheduler could not materialize it lately (it is retried with backoff). */
  schedule_error: string | null;
  failures: number;
  last_run: LastRun | null;
  /** Its next slots (none: it runs on request, or its schedule no longer compiles). */
  next_fires: UpcomingFire[];
}

export interface DefinitionBackfill {
  definition: string;
  slots: number;
  /** New backfill rows */
  inserted: number;
  /** Slots that had a row already */
  already_recorded: number;
}

export interface DefinitionBackfillRequest {
  /** An ISO 8601 instant with an offset, or a date YYYY-MM-DD: the start of that day in the schedule's zone */
  from: string;
  /** An ISO 8601 instant with an offset, or a date YYYY-MM-DD: the start of that day in the schedule's zone */
  until: string;
}

/** One version (the latest unless asked) with the definition's schedule, state and next fire times: what `nbcast definitions show --json` prints and `GET /definitions/{name}` answers — one record, so the two cannot differ. */
export interface DefinitionDetail {
  definition: string;
  version: number;
  sha256: string;
  author: string;
  message: string;
  created_at: string;
  /** Its parameters, as the `parameters` cell declares them. */
  parameters: Parameter[];
  /** The version's `nbcast` metadata block. */
  nbcast: Record<string, unknown>;
  /** What its runs get for each parameter — the metadata block's value or binding over the cell's default (`effective`). */
  effective_parameters: EffectiveParameter[];
  paused: boolean;
  next_fire_at: string | null;
  /** Why the scheduler could not materialize it lately (it is retried with backoff). */
  schedule_error: string | null;
  failures: number;
  last_run: LastRun | null;
  latest_version: number;
  /** '<cron or every …> (<zone>)' or 'manual'. */
  schedule: string;
  timezone: string;
  /** Its next slots (none: it runs on request, or its schedule no longer compiles). */
  next_fires: UpcomingFire[];
}

/** nbdime's structured diff from version a to version b (bounded). */
export interface DefinitionDiff {
  definition: string;
  a: number;
  b: number;
  summary?: ReviewSummary;
  diff: Record<string, unknown>[];
  /** With format=nbdime: version a's stored notebook, the base the diff applies to (nbdime's NotebookDiffModel takes both) */
  base?: Record<string, unknown>;
}

export interface DefinitionPage {
  items: Definition[];
  /** The next page's `after` (null: this is the last page) */
  next: string | null;
}

export interface DefinitionPaused {
  definition: string;
  paused: boolean;
  /** False: it was already so */
  changed: boolean;
  /** Resume: slots due before the pause, decided */
  caught_up?: number;
  /** Resume: slots recorded SKIPPED paused */
  skipped_paused?: number;
}

/** A slot of a published definition as `nbcast schedule preview --definition … --json` lists it: its data interval and parameter values. */
export interface DefinitionPreviewSlot {
  slot_key: string;
  local: string;
  fire_at: string;
  status: "scheduled" | "skipped";
  reason: string | null;
  interval_start: string;
  interval_end: string;
  parameters: Record<string, unknown>;
}

/** A notebook to publish: `path` (under the server's root folder, read through its contents manager) or `notebook` (its JSON), not both. */
export interface DefinitionPublish {
  path?: string;
  notebook?: Record<string, unknown>;
  /** Definition name (default: metadata 'name', else the file's stem, else 'report') */
  name?: string;
  /** What changed in this version */
  message?: string;
}

export interface DefinitionPublished {
  /** False: the notebook equals the latest version; nothing new */
  created: boolean;
  warnings: string[];
  definition: Definition;
  version: DefinitionVersion;
}

export interface DefinitionRunCreated {
  definition: string;
  run_ids: number[];
  /** True: test runs */
  test?: boolean;
  /** Test runs: where they go ([]: no one) */
  to?: string[];
  /** A dry run: the slot it runs */
  slot_key?: string | null;
  /** Test runs: the version tried */
  version?: number;
}

export interface DefinitionRunRequest {
  /** Values overriding the version's (each may be a slot binding) */
  parameters?: Record<string, unknown>;
  /** The instant whose period the run reports (default: now); with test: dry-run the slot firing then, or the first after it */
  at?: string;
  /** A test run: rendered, sent to no subscriber, marked TEST */
  test?: boolean;
  /** With test: the addresses to send it to (default: the caller's own, when known; [] for no one) */
  to?: string[];
  /** With test: dry-run this slot (its key, 2026-12-07T07:00) */
  slot?: string;
  /** With test: only the audience of this recipient */
  as?: string;
  /** With test: try this version instead of the latest */
  version?: number;
}

/** One published version of a definition. */
export interface DefinitionVersion {
  definition: string;
  version: number;
  sha256: string;
  author: string;
  message: string;
  created_at: string;
  /** Its parameters, as the `parameters` cell declares them. */
  parameters: Parameter[];
  /** The version's `nbcast` metadata block. */
  nbcast: Record<string, unknown>;
  /** What its runs get for each parameter — the metadata block's value or binding over the cell's default (`effective`). */
  effective_parameters: EffectiveParameter[];
}

export interface DefinitionVersionList {
  items: DefinitionVersion[];
}

export interface DeliveriesRetried {
  run: number;
  /** FAILED deliveries put back to PENDING */
  retried: number;
}

/** One ledger row: a run's report to one recipient over one channel (the keys of `nbcast deliveries list --json`). */
export interface Delivery {
  id: number;
  run: number;
  /** The definition's name. */
  report: string;
  channel: string;
  /** As the caller may see it: a URL is masked but for the tenant's admins. */
  recipient: string;
  formats: string[];
  state: "PENDING" | "SENDING" | "SENT" | "FAILED" | "SUPPRESSED";
  reason: "unsubscribed" | "superseded" | "stale" | "no_results" | "unchanged" | "render_failed" | "refused" | "max_attempts" | "outcome_unknown" | "lease_expired" | "prepare_failed" | "internal_error" | "no_channel" | "retry" | "retry_requested" | "lease_low" | "late_renditions" | null;
  /** How many times it was claimed (a release unsent counts too; see `Delivery`). */
  attempts: number;
  /** A send was repeated without knowing whether the earlier one arrived. */
  possible_duplicate: boolean;
  /** The last attempt may have arrived (a timeout after sending, a worker that died). */
  outcome_unknown: boolean;
  /** When it is due (again), while PENDING. */
  not_before: string;
  sent_at: string | null;
  /** What the channel answered (SMTP reply, Slack `ts`, HTTP status, links). */
  receipt: Record<string, unknown> | null;
  /** The last error: `{"error": type, "message": …}` (on a row whose recipient is masked, with the URLs in it masked too). */
  error: Record<string, unknown> | null;
  created_at: string;
  updated_at: string;
}

export interface DeliveryPage {
  items: Delivery[];
  /** The next page's `after` (null: this is the last page) */
  next: string | null;
}

/** A parameter as the version's runs get it: the metadata block's value or binding over the cell's default. */
export interface EffectiveParameter {
  name: string;
  /** What a run gets (a binding as written: resolved per slot) */
  value: unknown;
  /** `metadata` (the block's literal), `binding` (the block's binding, resolved per slot) or `default` (the cell's). */
  source: "metadata" | "binding" | "default";
  /** The cell's default, for comparison */
  default: unknown;
}

export interface EmbeddedService {
  kind: "scheduler" | "worker" | "delivery-worker" | "oversight";
  /** The nbcast command the child runs */
  command: string;
  /** The process id of the child (its last one while it backs off; null before its first start) */
  pid: number | null;
  /** backing-off: it exited and starts again at next_start_at */
  state: "running" | "backing-off" | "stopped";
  /** Starts after the first */
  restarts: number;
  /** Exits in a row without a stable period; sets the backoff */
  consecutive_failures: number;
  started_at: string | null;
  /** Its last exit status; negative: killed by that signal; null: it has not exited (or could not be started) */
  last_exit_code: number | null;
  last_exit_at: string | null;
  next_start_at: string | null;
}

export interface EmbeddedServices {
  /** Whether this server runs the services as its children */
  enabled: boolean;
  /** The server is stopping them */
  stopping: boolean;
  children: EmbeddedService[];
}

export interface Error {
  error: {
    code: string;
    message: string;
    field: string | null;
  };
}

/** The services from their heartbeat rows, with their lag, and the scheduler's lag. */
export interface Health {
  /** A scheduler, a worker, a delivery worker and an oversight service are alive and the scheduler keeps up (lag under a minute). */
  ok: boolean;
  checked_at: string;
  /** How many services of each required kind are alive. */
  alive: Record<string, number>;
  /** Seconds the oldest due, unmaterialized slot has waited (0: none waits). */
  scheduler_lag_s: number;
  /** Live workers running reports without a sandbox (`--sandbox off`, or a machine that cannot sandbox): the status page warns for as long as they run. */
  unsandboxed_workers: string[];
  services: Service[];
}

/** A definition's newest run. */
export interface LastRun {
  state: string;
  reason: string | null;
  fire_at: string | null;
}

/** One opening of a signed link: when, from which network (IPv4 /24, IPv6 /48, or `unknown`: never the whole address) and with which user agent. */
export interface LinkOpen {
  link: number;
  run: number;
  delivery: number | null;
  recipient: string;
  file: string;
  opened_at: string;
  network: string;
  user_agent: string;
}

export interface NotebookCheck {
  name: string | null;
  parameters: Parameter[];
  /** The next slots that fire, each with the values its bound parameters resolve to (none: no parameter is bound) */
  bound?: {
    slot_key: string;
    local: string;
    parameters: Record<string, unknown>;
  }[];
  problem: {
    field: string | null;
    message: string;
  } | null;
  next_fires: UpcomingFire[];
  published: {
    name: string;
    latest_version: number;
    /** The file the definition is bound to, relative to the server's root folder ('outside-root:<file name>' for one outside it), or 'api:<name>' for a notebook published as JSON; never an absolute path of the server */
    source_path: string;
    /** The definition is bound to the file `path` names */
    this_file: boolean;
    paused: boolean;
    /** The notebook equals the latest version */
    same: boolean;
  } | null;
  channels: string[];
  /** The channels not configured where this server runs, each with what configures it (deliveries on them fail no_channel) */
  unconfigured?: Record<string, string>;
  formats: string[];
  zones: string[];
  timezone: string | null;
}

export interface NotebookCheckRequest {
  /** The notebook's JSON */
  notebook: Record<string, unknown>;
  /** Its contents path: names the definition by default */
  path?: string;
  /** The definition name to publish as */
  name?: string;
  /** A zone (the browser's) to answer as a schedule may name it */
  timezone?: string;
}

/** A parameter as the version's `parameters` cell declares it, with the values it accepts (the block's `allowed`, or a `Literal[...]` annotation). */
export interface Parameter {
  name: string;
  /** Its JSON type (`integer`, `number`, `string`, `boolean`, `array`, `object`), from the literal default's. */
  type: string;
  /** The default as written in the cell (a JSON value) */
  default: unknown;
  /** The comment at the end of its line. */
  help: string;
  /** The values it accepts — choices, bounds, a pattern (`allowed`); None: any value of its type. */
  allowed: AllowedValues | null;
}

/** A slot as `nbcast schedule preview --json` lists it. */
export interface PreviewSlot {
  slot_key: string;
  local: string;
  fire_at: string;
  status: "scheduled" | "skipped";
  reason: string | null;
}

/** The quotas to change (at least one); a budget null removes the budget. */
export interface QuotaChange {
  max_concurrent_runs?: number;
  cpus_per_run?: number;
  memory_mb_per_run?: number;
  run_timeout_s?: number;
  max_attempts?: number;
  share?: number;
  max_processes_per_run?: number;
  budget_warehouse_bytes_per_day?: number | null;
  budget_cpu_s_per_day?: number | null;
}

/** One format of one run; download it from /runs/{run_id}/renditions/{id} once its state is DONE. */
export interface Rendition {
  id: number;
  run: number;
  format: string;
  /** `""`, or `"late"` for the copy with the staleness banner. */
  variant: string;
  state: "PENDING" | "DONE" | "FAILED";
  attempts: number;
  sha256: string | null;
  size: number | null;
  filename: string | null;
  media_type: string | null;
  /** How long the render took. */
  seconds: number | null;
  error: Record<string, unknown> | null;
  rendered_at: string | null;
}

export interface Rerun {
  id: number;
  rerun_of: number;
  kind: "rerun";
  state: "QUEUED";
}

/** One line of the summary. */
export interface ReviewItem {
  /** parameters, schedule, recipients, outputs, settings or code. */
  section: string;
  text: string;
  /** A change a reader would likely get wrong (a default hidden by the block). */
  warning: boolean;
}

/** What changes from version a to b for the people who receive the report. */
export interface ReviewSummary {
  /** One line per change, by section: parameters, schedule, recipients, outputs, settings, code. */
  items: ReviewItem[];
  /** The next fire times under version a's schedule (only when the schedule changes). */
  fires_before: string[];
  /** The next fire times under version b's schedule (only when the schedule changes). */
  fires_after: string[];
  /** Lines left out past the first 200. */
  more: number;
}

/** A run as listed (the keys of `nbcast runs list --json`). */
export interface Run {
  id: number;
  definition: string;
  slot_key: string | null;
  kind: "scheduled" | "backfill" | "manual" | "rerun" | "test";
  state: "QUEUED" | "LEASED" | "RUNNING" | "SUCCEEDED" | "FAILED" | "TIMED_OUT" | "CANCELLED" | "SKIPPED" | "MISSED";
  reason: string | null;
  fire_at: string;
  version: number;
  parameters: Record<string, unknown>;
  created_at: string;
  /** Attempts made so far (the current attempt's number). */
  attempt: number;
  /** The executed notebook, once the run has ended with one. */
  artifact_sha256: string | null;
  started_at: string | null;
  finished_at: string | null;
  /** The period it covers (`period`); None for a run made before runs had one. */
  context: Record<string, unknown> | null;
  /** The run a `rerun` repeats. */
  rerun_of: number | null;
  /** A test run's addresses (`[]`: no one); None for every other kind. */
  test_to: string[] | null;
}

/** Two runs' reports compared: recorded tables by name and key (each changed value with its delta), text by cell (unified lines), images by digest. */
export interface RunComparison {
  /** The first run: id, definition, version, kind, slot_key, parameters */
  a: Record<string, unknown>;
  /** The second run, the same keys */
  b: Record<string, unknown>;
  /** A reader would see no difference */
  same: boolean;
  tables: Record<string, unknown>[];
  texts: Record<string, unknown>[];
  images: Record<string, unknown>[];
  more_images: number;
}

/** Everything about one run (the keys of `nbcast runs show --json`, with the newest 100 openings of its signed links). */
export interface RunDetail {
  id: number;
  tenant: string;
  definition: string;
  version: number;
  slot_key: string | null;
  kind: "scheduled" | "backfill" | "manual" | "rerun" | "test";
  fire_at: string;
  state: "QUEUED" | "LEASED" | "RUNNING" | "SUCCEEDED" | "FAILED" | "TIMED_OUT" | "CANCELLED" | "SKIPPED" | "MISSED";
  reason: string | null;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  /** When it may be claimed (a retry's backoff). */
  not_before: string;
  parameters: Record<string, unknown>;
  attempt: number;
  /** The executed notebook's sha256: the run's, else its latest attempt's. */
  notebook_sha256: string | null;
  /** Why it failed (or why its last attempt did), as far as it is known. */
  error: RunError | null;
  cancel_requested_at: string | null;
  cancel_requested_by: string | null;
  /** The period it covers (`period`). */
  context: Record<string, unknown> | null;
  /** The run a `rerun` repeats. */
  rerun_of: number | null;
  /** A test run's addresses (`[]`: no one); None for every other kind. */
  test_to: string[] | null;
  attempts: Attempt[];
  /** The delivery plane's renditions of the run (`queries`). */
  renditions: Rendition[];
  /** The delivery ledger's rows of the run, one per recipient and channel. */
  deliveries: Delivery[];
  /** The openings of the run's signed links, newest first (at most `LINK_OPENS_SHOWN`). */
  link_opens: LinkOpen[];
  /** Whether older openings exist than those listed. */
  link_opens_more: boolean;
}

/** Why an attempt or a run failed: the exception, the failing cell (papermill's index) and the source line that raised. */
export interface RunError {
  /** The exception's class name (`ZeroDivisionError`). */
  ename: string | null;
  /** Its message. */
  evalue: string | null;
  /** papermill's index of the failing cell in the executed notebook. */
  cell_index: number | null;
  /** The failing line, counted from 1 within the cell. */
  line_number: number | null;
  /** That line's source. */
  source_line: string | null;
  /** A permanent failure's or the reaper's reason (`no_such_kernel`, `lease_expired`). */
  reason: string | null;
  /** Text of an error that is not an exception (a timeout, an expired lease). */
  message: string | null;
}

export interface RunPage {
  items: Run[];
  /** The next page's `after` (null: this is the last page) */
  next: string | null;
}

/** One service process from its heartbeat row. */
export interface Service {
  kind: string;
  name: string;
  host: string;
  pid: number;
  version: string;
  state: "running" | "stopping" | "stopped";
  alive: boolean;
  started_at: string;
  beat_at: string;
  /** Seconds since its last heartbeat. */
  lag_s: number;
  iterations: number;
  errors: number;
  last_error: string | null;
  detail: Record<string, unknown>;
}

/** The alert about a miss, sent to the definition's owner. */
export interface SlaAlert {
  /** One of `AlertState`. */
  state: "PENDING" | "SENT" | "FAILED" | "NONE";
  channel: string | null;
  /** As the caller may see it: a URL is masked but for the tenant's admins. */
  to: string | null;
  attempts: number;
  alerted_at: string | null;
  error: Record<string, unknown> | null;
}

/** A slot not delivered within its definition's sla.delivered_within, and the alert sent to the definition's owner (the keys of `nbcast sla list --json`). */
export interface SlaMiss {
  id: number;
  definition: string;
  /** The slot's key (its local wall time). */
  slot: string;
  fire_at: string;
  deadline: string;
  detected_at: string;
  /** The slot's run state when the miss was found (SKIPPED, MISSED, FAILED, RUNNING, SUCCEEDED without a timely delivery, …). */
  state: string;
  reason: string | null;
  /** The slot's first run (the base audience's, if it has one). */
  run: number | null;
  alert: SlaAlert;
}

export interface SlaMissPage {
  items: SlaMiss[];
  /** The next page's `after` (null: this is the last page) */
  next: string | null;
}

/** A tenant and its quotas (the keys of `nbcast tenants list --json`). */
export interface Tenant {
  name: string;
  created_at: string;
  /** The most its admins may set each quota to, set by operators; a budget's None: they may remove it (`ceilings`). */
  ceilings: {
    max_concurrent_runs?: number;
    cpus_per_run?: number;
    memory_mb_per_run?: number;
    run_timeout_s?: number;
    max_attempts?: number;
    share?: number;
    max_processes_per_run?: number;
    budget_warehouse_bytes_per_day?: number | null;
    budget_cpu_s_per_day?: number | null;
  };
  /** What its sandboxed kernels reach over the network: `host` or `none` (`set_network`). */
  network: "host" | "none";
  max_concurrent_runs: number;
  cpus_per_run: number;
  memory_mb_per_run: number;
  run_timeout_s: number;
  max_attempts: number;
  share: number;
  max_processes_per_run: number;
  budget_warehouse_bytes_per_day: number | null;
  budget_cpu_s_per_day: number | null;
}

export interface TenantList {
  items: Tenant[];
}

/** A coming slot in the definition's zone, with what DST does to it (`note`: e.g. '01:30 happens twice on 2026-11-01: runs both (EDT, then EST)'). */
export interface UpcomingFire {
  slot_key: string;
  /** When it fires, in the definition's zone. */
  local: string;
  /** The same instant in UTC. */
  fire_at: string;
  /** `scheduled`, or `skipped` (a DST-gap slot under `skip`). */
  status: "scheduled" | "skipped";
  reason: string | null;
  /** What DST does to it (module docstring); None on an ordinary day. */
  note: string | null;
}
