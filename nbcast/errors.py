"""The exceptions nbcast raises, as one tree rooted at :class:`NbcastError`.

::

    NbcastError
    ├── NotFoundError                not there for this caller (another tenant's is too)
    ├── AccessDeniedError            the caller may not do this
    ├── ConflictError                the object's state forbids it (a finished run)
    ├── ConfigError                  bad or missing configuration (env, settings)
    ├── StorageError                 the database could not be opened or migrated
    │   └── SchedulerLockedError     another scheduler holds the embedded database's lock
    ├── DefinitionError              a report definition is not acceptable
    │   ├── NotebookError            not JSON, not a valid notebook, bad tags
    │   ├── ParametersCellError      the parameters cell is not literal assignments
    │   ├── MetadataError            the ``nbcast`` metadata block is invalid
    │   ├── ParameterValueError      parameter values do not match the schema
    │   ├── DuplicateDefinitionError the name is taken by a definition from another file
    │   └── UnknownDefinitionError   no definition / version with that name or number
    │                                (also a NotFoundError)
    ├── ScheduleError                a schedule cannot be compiled or previewed
    ├── ExecutionError               a run could not be executed to its end
    │   ├── NotebookExecutionError   a cell raised (cell index, ename, evalue, traceback)
    │   ├── RunTimeoutError          the run exceeded its time limit
    │   ├── RunCancelledError        the run was cancelled while it executed
    │   ├── OutputTooLargeError      the run printed more than its output limits allow
    │   ├── LeaseLostError           this attempt no longer holds the run (fencing)
    │   ├── UnknownRunError          no such run for this caller (also a NotFoundError)
    │   └── RunFinishedError         the run has ended already (also a ConflictError)
    ├── QueryLimitExceeded           a warehouse query hit its row, byte or time cap
    │   └── BudgetExhausted          … or the tenant's daily warehouse budget
    └── DeliveryError                a report could not be rendered or delivered
        ├── RenderError              a renderer could not produce its format
        ├── ChannelError             a channel could not send
        │   ├── TransientChannelError    worth retrying (``retry_after`` if the peer said)
        │   ├── PermanentChannelError    not worth retrying (bad address, refused for good)
        │   └── OutcomeUnknownError      the send may have arrived (timeout after sending)
        └── LinkError                a signed link is malformed, forged, expired or revoked

Every exception is a plain ``Exception`` subclass whose constructor arguments are kept
in ``args``, so each one pickles and unpickles to an equal exception: Ray ships them
between processes. Errors with structured fields store them as attributes *and* pass
them to ``super().__init__`` in order, which is what makes that work.

User-facing commands print ``str(error)`` on one line and exit with status 2 for any
``NbcastError``. The REST API answers 404 for a :class:`NotFoundError`, 403 for an
:class:`AccessDeniedError`, 409 for a :class:`ConflictError` and 400 for any other
``NbcastError`` (:mod:`nbcast.server_extension.errors`); the three classes sit at the
root, and an error of a plane that is one of them inherits both.
"""

from __future__ import annotations

__all__ = [
    "AccessDeniedError",
    "BudgetExhausted",
    "ChannelError",
    "ConfigError",
    "ConflictError",
    "DefinitionError",
    "DeliveryError",
    "DuplicateDefinitionError",
    "ExecutionError",
    "LeaseLostError",
    "LinkError",
    "MetadataError",
    "NbcastError",
    "NotFoundError",
    "NotebookError",
    "NotebookExecutionError",
    "OutcomeUnknownError",
    "OutputTooLargeError",
    "ParameterValueError",
    "ParametersCellError",
    "PermanentChannelError",
    "QueryLimitExceeded",
    "RenderError",
    "RunCancelledError",
    "RunFinishedError",
    "RunTimeoutError",
    "ScheduleError",
    "SchedulerLockedError",
    "StorageError",
    "TransientChannelError",
    "UnknownDefinitionError",
    "UnknownRunError",
]


class NbcastError(Exception):
    """Root of every error nbcast raises on purpose.

    ``field`` names what a refusal is about, where it is about one thing a person
    typed: a metadata path (``schedule.timezone``), a parameter (``parameters.top_n``)
    or a query argument (``from``); None otherwise. The API answers it as ``field``
    and the Lab shows the refusal next to that input."""

    field: str | None = None

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.args == getattr(other, "args", None)

    def __hash__(self) -> int:
        return hash((type(self), self.args))


class NotFoundError(NbcastError):
    """What was asked for does not exist for this caller; another tenant's object is
    not found either, so an id never tells whether it exists elsewhere."""


class AccessDeniedError(NbcastError):
    """The caller is known but may not do this."""


class ConflictError(NbcastError):
    """The request is well formed, but the object's state forbids it now."""


class ConfigError(NbcastError):
    """Configuration is missing or malformed."""


class StorageError(NbcastError):
    """The database could not be opened, reached or migrated."""


class SchedulerLockedError(StorageError):
    """Another scheduler process already owns the embedded (SQLite) database."""


class DefinitionError(NbcastError):
    """A report definition (notebook, metadata, parameters) is not acceptable."""


class NotebookError(DefinitionError):
    """The file is not JSON, not a valid notebook, or its cells are tagged wrongly."""


class ParametersCellError(DefinitionError):
    """The cell tagged ``parameters`` holds something other than literal assignments.

    ``line`` is the 1-based line inside that cell.
    """

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message, line)
        self.message = message
        self.line = line

    def __str__(self) -> str:
        if self.line is None:
            return f"parameters cell: {self.message}"
        return f"parameters cell, line {self.line}: {self.message}"


class MetadataError(DefinitionError):
    """The ``nbcast`` metadata block is invalid; ``field`` names the dotted path."""

    field: str

    def __init__(self, field: str, message: str) -> None:
        super().__init__(field, message)
        self.field = field
        self.message = message

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class ParameterValueError(DefinitionError):
    """Parameter values were refused; ``problems`` lists each one and ``names`` the
    parameters they are about (in order; an empty name for a problem with the values as
    a whole). ``field`` is ``parameters.<the first name>``, or ``parameters``."""

    field: str

    def __init__(self, problems: tuple[str, ...], names: tuple[str, ...] = ()) -> None:
        super().__init__(tuple(problems), tuple(names))
        self.problems = tuple(problems)
        self.names = tuple(names)
        first = next((n for n in self.names if n), None)
        self.field = f"parameters.{first}" if first else "parameters"

    def about_field(self) -> str:
        """The problems, joined, without the name the field already gives (``top_n:
        expected int`` under ``parameters.top_n`` reads ``expected int``)."""
        text = "; ".join(self.problems)
        first = self.names[0] if self.names else ""
        return text[len(first) + 2 :] if first and text.startswith(f"{first}: ") else text

    def __str__(self) -> str:
        return "invalid parameters: " + "; ".join(self.problems)


class DuplicateDefinitionError(DefinitionError):
    """A definition of that name already exists, published from another file.

    ``name``, ``bound_to`` (the file the definition is bound to) and ``given`` (the
    file of the refused publish) let a face word the refusal its own way: the server
    shows no absolute path of its own file system."""

    def __init__(
        self,
        message: str,
        *,
        name: str | None = None,
        bound_to: str | None = None,
        given: str | None = None,
    ) -> None:
        super().__init__(message)
        self.name = name
        self.bound_to = bound_to
        self.given = given


class UnknownDefinitionError(DefinitionError, NotFoundError):
    """No definition, or no version, matches what was asked for."""


class ScheduleError(NbcastError):
    """A schedule cannot be compiled, or a preview range is unacceptable (``field``:
    the argument, ``from`` or ``to``, when it is about one)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message, field)
        self.message = message
        self.field = field

    def __str__(self) -> str:
        return self.message


class ExecutionError(NbcastError):
    """A run could not be executed to its end."""


class NotebookExecutionError(ExecutionError):
    """A cell raised. Keeps papermill's structured fields, not just a message."""

    def __init__(
        self, cell_index: int, ename: str, evalue: str, traceback: tuple[str, ...] = ()
    ) -> None:
        super().__init__(cell_index, ename, evalue, tuple(traceback))
        self.cell_index = cell_index
        self.ename = ename
        self.evalue = evalue
        self.traceback = tuple(traceback)

    def __str__(self) -> str:
        return f"cell {self.cell_index} raised {self.ename}: {self.evalue}"


class RunTimeoutError(ExecutionError):
    """The run exceeded its time limit and its kernel was stopped."""


class RunCancelledError(ExecutionError):
    """The run was cancelled while it executed."""


class OutputTooLargeError(ExecutionError):
    """A run sent more output than its limits allow; ``cell_index`` is papermill's
    index of the cell, when known. Not retried: the same report would do it again."""

    def __init__(self, message: str, cell_index: int | None = None) -> None:
        super().__init__(message, cell_index)
        self.message = message
        self.cell_index = cell_index

    def __str__(self) -> str:
        return self.message


class UnknownRunError(ExecutionError, NotFoundError):
    """No run with that id in the caller's tenant."""


class RunFinishedError(ExecutionError, ConflictError):
    """The run has ended already (it cannot be cancelled)."""


class LeaseLostError(ExecutionError):
    """This attempt no longer holds the run's lease; its writes are refused (fencing)."""


class QueryLimitExceeded(NbcastError):
    """A warehouse query hit a cap. ``limit`` is ``rows``, ``bytes``, ``seconds`` or
    ``budget`` (the tenant's daily warehouse budget)."""

    def __init__(self, limit: str, cap: float, message: str) -> None:
        super().__init__(limit, cap, message)
        self.limit = limit
        self.cap = cap
        self.message = message

    def __str__(self) -> str:
        return self.message


class BudgetExhausted(QueryLimitExceeded):
    """A warehouse query would read past the tenant's daily budget (``limit``
    ``budget``). Not the report's fault: the run is tried again once the budget starts
    again (the executor retries it whatever the definition's ``retry_on``)."""

    def __init__(self, cap: float, message: str) -> None:
        super().__init__("budget", cap, message)
        self.args = (cap, message)  # what pickling calls it with again


class DeliveryError(NbcastError):
    """A report could not be rendered or delivered."""


class RenderError(DeliveryError):
    """A renderer could not produce its format from the executed notebook."""


class ChannelError(DeliveryError):
    """A channel could not send a delivery."""


class TransientChannelError(ChannelError):
    """The send failed in a way worth retrying (a 4xx/5xx SMTP reply, HTTP 429/5xx).

    ``retry_after`` is the wait in seconds the peer asked for (``Retry-After``), or None.
    """

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message, retry_after)
        self.message = message
        self.retry_after = retry_after

    def __str__(self) -> str:
        return self.message


class PermanentChannelError(ChannelError):
    """The send was refused for good (an unknown mailbox, a channel that does not
    exist): retrying would not help; the delivery fails at once."""


class OutcomeUnknownError(ChannelError):
    """The send may or may not have arrived (the peer timed out after accepting the
    request). The ledger asks the channel to check before sending again."""


class LinkError(DeliveryError):
    """A signed link is malformed, forged, expired or revoked."""
