//! The OTLP messages `--audit-otlp` sends, as `prost` structs: only what an
//! `ExportLogsServiceRequest` of log records needs, with the field numbers of the official
//! definitions (opentelemetry-proto v1.10.0, the release the PyPI `opentelemetry-proto`
//! 1.45 package is generated from; `opentelemetry/proto/collector/logs/v1/
//! logs_service.proto`, `logs/v1/logs.proto`, `common/v1/common.proto`,
//! `resource/v1/resource.proto`). Fields airlock never sets (`schema_url`,
//! `dropped_attributes_count`, array and key-value-list values, ...) are left out: a
//! protobuf reader skips nothing it does not get, and an absent field reads as its default.
//! Derived, not generated: no `protoc` and no build script.

/// `opentelemetry.proto.collector.logs.v1.ExportLogsServiceRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportLogsServiceRequest {
    /// `repeated ResourceLogs resource_logs = 1`.
    #[prost(message, repeated, tag = "1")]
    pub resource_logs: Vec<ResourceLogs>,
}

/// `opentelemetry.proto.collector.logs.v1.ExportLogsServiceResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportLogsServiceResponse {
    /// `ExportLogsPartialSuccess partial_success = 1`.
    #[prost(message, optional, tag = "1")]
    pub partial_success: Option<ExportLogsPartialSuccess>,
}

/// `opentelemetry.proto.collector.logs.v1.ExportLogsPartialSuccess`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportLogsPartialSuccess {
    /// `int64 rejected_log_records = 1`.
    #[prost(int64, tag = "1")]
    pub rejected_log_records: i64,
    /// `string error_message = 2`.
    #[prost(string, tag = "2")]
    pub error_message: String,
}

/// `opentelemetry.proto.logs.v1.ResourceLogs`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ResourceLogs {
    /// `opentelemetry.proto.resource.v1.Resource resource = 1`.
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    /// `repeated ScopeLogs scope_logs = 2`.
    #[prost(message, repeated, tag = "2")]
    pub scope_logs: Vec<ScopeLogs>,
}

/// `opentelemetry.proto.resource.v1.Resource`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Resource {
    /// `repeated KeyValue attributes = 1`.
    #[prost(message, repeated, tag = "1")]
    pub attributes: Vec<KeyValue>,
}

/// `opentelemetry.proto.logs.v1.ScopeLogs`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ScopeLogs {
    /// `InstrumentationScope scope = 1`.
    #[prost(message, optional, tag = "1")]
    pub scope: Option<InstrumentationScope>,
    /// `repeated LogRecord log_records = 2`.
    #[prost(message, repeated, tag = "2")]
    pub log_records: Vec<LogRecord>,
}

/// `opentelemetry.proto.common.v1.InstrumentationScope`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InstrumentationScope {
    /// `string name = 1`.
    #[prost(string, tag = "1")]
    pub name: String,
    /// `string version = 2`.
    #[prost(string, tag = "2")]
    pub version: String,
}

/// `opentelemetry.proto.logs.v1.LogRecord`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LogRecord {
    /// `fixed64 time_unix_nano = 1`.
    #[prost(fixed64, tag = "1")]
    pub time_unix_nano: u64,
    /// `SeverityNumber severity_number = 2`.
    #[prost(int32, tag = "2")]
    pub severity_number: i32,
    /// `string severity_text = 3`.
    #[prost(string, tag = "3")]
    pub severity_text: String,
    /// `AnyValue body = 5`.
    #[prost(message, optional, tag = "5")]
    pub body: Option<AnyValue>,
    /// `repeated KeyValue attributes = 6`.
    #[prost(message, repeated, tag = "6")]
    pub attributes: Vec<KeyValue>,
    /// `fixed32 flags = 8`.
    #[prost(fixed32, tag = "8")]
    pub flags: u32,
    /// `bytes trace_id = 9` (16 bytes, or empty).
    #[prost(bytes = "vec", tag = "9")]
    pub trace_id: Vec<u8>,
    /// `bytes span_id = 10` (8 bytes, or empty).
    #[prost(bytes = "vec", tag = "10")]
    pub span_id: Vec<u8>,
    /// `fixed64 observed_time_unix_nano = 11`.
    #[prost(fixed64, tag = "11")]
    pub observed_time_unix_nano: u64,
    /// `string event_name = 12`.
    #[prost(string, tag = "12")]
    pub event_name: String,
}

/// `opentelemetry.proto.common.v1.KeyValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    /// `string key = 1`.
    #[prost(string, tag = "1")]
    pub key: String,
    /// `AnyValue value = 2`.
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
}

/// `opentelemetry.proto.common.v1.AnyValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AnyValue {
    /// `oneof value`.
    #[prost(oneof = "Value", tags = "1, 2, 3, 4")]
    pub value: Option<Value>,
}

/// The `value` oneof of `AnyValue` (the scalar cases).
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Value {
    /// `string string_value = 1`.
    #[prost(string, tag = "1")]
    StringValue(String),
    /// `bool bool_value = 2`.
    #[prost(bool, tag = "2")]
    BoolValue(bool),
    /// `int64 int_value = 3`.
    #[prost(int64, tag = "3")]
    IntValue(i64),
    /// `double double_value = 4`.
    #[prost(double, tag = "4")]
    DoubleValue(f64),
}

/// `SeverityNumber.SEVERITY_NUMBER_INFO`.
pub const SEVERITY_INFO: i32 = 9;
/// `SeverityNumber.SEVERITY_NUMBER_WARN`.
pub const SEVERITY_WARN: i32 = 13;

impl AnyValue {
    /// A string value.
    pub fn string(text: impl Into<String>) -> AnyValue {
        AnyValue {
            value: Some(Value::StringValue(text.into())),
        }
    }
}

impl KeyValue {
    /// `key` = the string `value`.
    pub fn string(key: &str, value: impl Into<String>) -> KeyValue {
        KeyValue {
            key: key.to_owned(),
            value: Some(AnyValue::string(value)),
        }
    }
}
