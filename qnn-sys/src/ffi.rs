//! Raw `repr(C)` declarations of the QNN core C API 2.x (layouts of core API 2.32 … 2.40), the
//! HTP custom configs, and the `QnnSystem` interface.
//!
//! Names follow the C API (`Qnn_Tensor_t`, `QNN_DATATYPE_FLOAT_16`, camelCase fields) so that
//! Qualcomm's documentation can be read against them. C enums are `u32` type aliases plus
//! constants (unknown values come back from the library), C `bool` is `u8`, C unions are Rust
//! `union`s. Every struct has a compile-time size/offset assertion (LP64: x86-64 and aarch64
//! Linux/Android); the numbers are those of the verified fact sheet the crate was written from.
//!
//! Every function-table entry is an `Option<unsafe extern "C" fn>`: the library may leave any
//! entry NULL. All entries return [`Qnn_ErrorHandle_t`] (64 bits; the code is `value & 0xFFFF`).
#![allow(non_camel_case_types, non_snake_case)]

use core::ffi::{c_char, c_void};
use core::mem::{align_of, offset_of, size_of};

// ---------------------------------------------------------------------------------------------
// Handles and basic scalars
// ---------------------------------------------------------------------------------------------

/// Result of every QNN call: 0 is success; the error code is `value & 0xFFFF`.
pub type Qnn_ErrorHandle_t = u64;
/// Opaque logger handle (`logCreate`). Small integers on the simulator: never dereference.
pub type Qnn_LogHandle_t = *mut c_void;
/// Opaque backend handle (`backendCreate`).
pub type Qnn_BackendHandle_t = *mut c_void;
/// Opaque device handle (`deviceCreate`); NULL means "default device".
pub type Qnn_DeviceHandle_t = *mut c_void;
/// Opaque context handle (`contextCreate`).
pub type Qnn_ContextHandle_t = *mut c_void;
/// Opaque graph handle (`graphCreate`); freed with its context.
pub type Qnn_GraphHandle_t = *mut c_void;
/// Opaque profile handle (`profileCreate`); NULL disables profiling.
pub type Qnn_ProfileHandle_t = *mut c_void;
/// Opaque signal handle (`signalCreate`); NULL means none.
pub type Qnn_SignalHandle_t = *mut c_void;
/// Opaque registered-memory handle (`memRegister`).
pub type Qnn_MemHandle_t = *mut c_void;
/// Profiling event identifier.
pub type QnnProfile_EventId_t = u64;
/// Property key for `propertyHasCapability`.
pub type QnnProperty_Key_t = u32;
/// Operation name returned by `backendGetSupportedOperations` (a C string).
pub type QnnBackend_OperationName_t = *const c_char;
/// Size of a context binary in bytes.
pub type Qnn_ContextBinarySize_t = u64;

/// Declares an opaque C type that is only ever used behind a pointer.
macro_rules! opaque {
    ($($(#[$m:meta])* $name:ident;)*) => {$(
        $(#[$m])*
        #[repr(C)]
        pub struct $name {
            _private: [u8; 0],
        }
    )*};
}

opaque! {
    /// `QnnProfile_Config_t`: profile configuration (layout not bound; pass NULL lists).
    QnnProfile_Config_t;
    /// `QnnSignal_Config_t`: signal configuration (layout not bound; pass NULL lists).
    QnnSignal_Config_t;
    /// `QnnProfile_EventData_t` (layout not bound).
    QnnProfile_EventData_t;
    /// `QnnProfile_ExtendedEventData_t` (layout not bound).
    QnnProfile_ExtendedEventData_t;
    /// `QnnGraph_ExecuteEnvironment_t` (layout not bound).
    QnnGraph_ExecuteEnvironment_t;
    /// `QnnGraph_Property_t` (layout not bound).
    QnnGraph_Property_t;
    /// `QnnBackend_Property_t` (layout not bound).
    QnnBackend_Property_t;
    /// `QnnContext_Property_t` (layout not bound).
    QnnContext_Property_t;
    /// `QnnContext_Params_t` (layout not bound).
    QnnContext_Params_t;
    /// `QnnContext_Buffer_t` (layout not bound).
    QnnContext_Buffer_t;
    /// `QnnGlobalConfig_t` (layout not bound).
    QnnGlobalConfig_t;
    /// `Qnn_ContextBinaryCallback_t` (layout not bound).
    Qnn_ContextBinaryCallback_t;
    /// `QnnDevice_CoreInfo_t` (layout not bound).
    QnnDevice_CoreInfo_t;
    /// `QnnHtpPerfInfrastructure_PowerConfig_t` (layout not bound).
    QnnHtpPerfInfrastructure_PowerConfig_t;
    /// `QnnHtpPerfInfrastructure_MemoryConfig_t` (layout not bound).
    QnnHtpPerfInfrastructure_MemoryConfig_t;
    /// `QnnSystemContext_BinaryInfo_t` (layout not bound).
    QnnSystemContext_BinaryInfo_t;
}

// ---------------------------------------------------------------------------------------------
// Versions
// ---------------------------------------------------------------------------------------------

/// `Qnn_Version_t`: a semantic version triple.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Qnn_Version_t {
    /// Major version: a change breaks compatibility.
    pub major: u32,
    /// Minor version: additions.
    pub minor: u32,
    /// Patch version.
    pub patch: u32,
}

/// `Qnn_ApiVersion_t`: core API version and backend-specific API version.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Qnn_ApiVersion_t {
    /// Version of the core QNN API the backend implements (2.40 on the simulator we test).
    pub coreApiVersion: Qnn_Version_t,
    /// Version of the backend's own API (HTP: 5.51 on the simulator we test).
    pub backendApiVersion: Qnn_Version_t,
}

// ---------------------------------------------------------------------------------------------
// Enumerations (u32 + constants)
// ---------------------------------------------------------------------------------------------

/// `Qnn_DataType_t`.
pub type Qnn_DataType_t = u32;
/// Signed 8-bit integer.
pub const QNN_DATATYPE_INT_8: Qnn_DataType_t = 0x0008;
/// Signed 16-bit integer.
pub const QNN_DATATYPE_INT_16: Qnn_DataType_t = 0x0016;
/// Signed 32-bit integer.
pub const QNN_DATATYPE_INT_32: Qnn_DataType_t = 0x0032;
/// Signed 64-bit integer.
pub const QNN_DATATYPE_INT_64: Qnn_DataType_t = 0x0064;
/// Unsigned 8-bit integer.
pub const QNN_DATATYPE_UINT_8: Qnn_DataType_t = 0x0108;
/// Unsigned 16-bit integer.
pub const QNN_DATATYPE_UINT_16: Qnn_DataType_t = 0x0116;
/// Unsigned 32-bit integer.
pub const QNN_DATATYPE_UINT_32: Qnn_DataType_t = 0x0132;
/// Unsigned 64-bit integer.
pub const QNN_DATATYPE_UINT_64: Qnn_DataType_t = 0x0164;
/// IEEE 754 binary16.
pub const QNN_DATATYPE_FLOAT_16: Qnn_DataType_t = 0x0216;
/// bfloat16.
pub const QNN_DATATYPE_BFLOAT_16: Qnn_DataType_t = 0x0226;
/// IEEE 754 binary32.
pub const QNN_DATATYPE_FLOAT_32: Qnn_DataType_t = 0x0232;
/// IEEE 754 binary64.
pub const QNN_DATATYPE_FLOAT_64: Qnn_DataType_t = 0x0264;
/// Signed 4-bit fixed point (quantized).
pub const QNN_DATATYPE_SFIXED_POINT_4: Qnn_DataType_t = 0x0304;
/// Signed 8-bit fixed point (quantized).
pub const QNN_DATATYPE_SFIXED_POINT_8: Qnn_DataType_t = 0x0308;
/// Signed 16-bit fixed point (quantized).
pub const QNN_DATATYPE_SFIXED_POINT_16: Qnn_DataType_t = 0x0316;
/// Signed 32-bit fixed point (quantized).
pub const QNN_DATATYPE_SFIXED_POINT_32: Qnn_DataType_t = 0x0332;
/// Unsigned 4-bit fixed point (quantized).
pub const QNN_DATATYPE_UFIXED_POINT_4: Qnn_DataType_t = 0x0404;
/// Unsigned 8-bit fixed point (quantized).
pub const QNN_DATATYPE_UFIXED_POINT_8: Qnn_DataType_t = 0x0408;
/// Unsigned 16-bit fixed point (quantized).
pub const QNN_DATATYPE_UFIXED_POINT_16: Qnn_DataType_t = 0x0416;
/// Unsigned 32-bit fixed point (quantized).
pub const QNN_DATATYPE_UFIXED_POINT_32: Qnn_DataType_t = 0x0432;
/// 8-bit boolean.
pub const QNN_DATATYPE_BOOL_8: Qnn_DataType_t = 0x0508;
/// String (scalar params only).
pub const QNN_DATATYPE_STRING: Qnn_DataType_t = 0x0608;
/// Undefined data type (the init value).
pub const QNN_DATATYPE_UNDEFINED: Qnn_DataType_t = 0x7FFF_FFFF;

/// `Qnn_TensorType_t`.
pub type Qnn_TensorType_t = u32;
/// Graph input written by the application.
pub const QNN_TENSOR_TYPE_APP_WRITE: Qnn_TensorType_t = 0;
/// Graph output read by the application.
pub const QNN_TENSOR_TYPE_APP_READ: Qnn_TensorType_t = 1;
/// Read-write application tensor (not allowed for graph tensors).
pub const QNN_TENSOR_TYPE_APP_READWRITE: Qnn_TensorType_t = 2;
/// Intermediate tensor inside a graph.
pub const QNN_TENSOR_TYPE_NATIVE: Qnn_TensorType_t = 3;
/// Constant tensor; its data is copied during tensor creation.
pub const QNN_TENSOR_TYPE_STATIC: Qnn_TensorType_t = 4;
/// Null (absent optional) tensor.
pub const QNN_TENSOR_TYPE_NULL: Qnn_TensorType_t = 5;
/// Static tensor whose data may be updated later.
pub const QNN_TENSOR_TYPE_UPDATEABLE_STATIC: Qnn_TensorType_t = 6;
/// Native tensor that may be updated later.
pub const QNN_TENSOR_TYPE_UPDATEABLE_NATIVE: Qnn_TensorType_t = 7;
/// Updateable graph input.
pub const QNN_TENSOR_TYPE_UPDATEABLE_APP_WRITE: Qnn_TensorType_t = 8;
/// Updateable graph output.
pub const QNN_TENSOR_TYPE_UPDATEABLE_APP_READ: Qnn_TensorType_t = 9;
/// Updateable read-write application tensor.
pub const QNN_TENSOR_TYPE_UPDATEABLE_APP_READWRITE: Qnn_TensorType_t = 10;
/// Optional graph input.
pub const QNN_TENSOR_TYPE_OPTIONAL_APP_WRITE: Qnn_TensorType_t = 11;
/// Optional graph output.
pub const QNN_TENSOR_TYPE_OPTIONAL_APP_READ: Qnn_TensorType_t = 12;
/// Optional read-write application tensor.
pub const QNN_TENSOR_TYPE_OPTIONAL_APP_READWRITE: Qnn_TensorType_t = 13;
/// Undefined tensor type (the init value).
pub const QNN_TENSOR_TYPE_UNDEFINED: Qnn_TensorType_t = 0x7FFF_FFFF;

/// `Qnn_TensorDataFormat_t`.
pub type Qnn_TensorDataFormat_t = u32;
/// Dense (flat buffer) data: the only format used here.
pub const QNN_TENSOR_DATA_FORMAT_DENSE: Qnn_TensorDataFormat_t = 0;
/// Alias of [`QNN_TENSOR_DATA_FORMAT_DENSE`].
pub const QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER: Qnn_TensorDataFormat_t = 0;
/// Sparse data (see `sparseParams` of [`Qnn_TensorV2_t`]).
pub const QNN_TENSOR_DATA_FORMAT_SPARSE: Qnn_TensorDataFormat_t = 1;
/// Codebook data.
pub const QNN_TENSOR_DATA_FORMAT_CODEBOOK: Qnn_TensorDataFormat_t = 2;
/// MX data.
pub const QNN_TENSOR_DATA_FORMAT_MX: Qnn_TensorDataFormat_t = 3;
/// HMX weight layout.
pub const QNN_TENSOR_DATA_FORMAT_HMX_WEIGHT_LAYOUT: Qnn_TensorDataFormat_t = 8;

/// `Qnn_TensorMemType_t`.
pub type Qnn_TensorMemType_t = u32;
/// Client buffer (`clientBuf`): plain host memory. The only kind the x86 simulator supports.
pub const QNN_TENSORMEMTYPE_RAW: Qnn_TensorMemType_t = 0;
/// Registered memory (`memHandle` from `memRegister`).
pub const QNN_TENSORMEMTYPE_MEMHANDLE: Qnn_TensorMemType_t = 1;
/// Retrieve-raw (V2 tensors only).
pub const QNN_TENSORMEMTYPE_RETRIEVE_RAW: Qnn_TensorMemType_t = 2;
/// Undefined memory type (the init value).
pub const QNN_TENSORMEMTYPE_UNDEFINED: Qnn_TensorMemType_t = 0x7FFF_FFFF;

/// `Qnn_Definition_t`: how quantization parameters are defined.
pub type Qnn_Definition_t = u32;
/// Generated by the implementation.
pub const QNN_DEFINITION_IMPL_GENERATED: Qnn_Definition_t = 0;
/// Defined by the caller.
pub const QNN_DEFINITION_DEFINED: Qnn_Definition_t = 1;
/// Undefined: required for float tensors (all-zero params make `graphAddNode` fail, 6007).
pub const QNN_DEFINITION_UNDEFINED: Qnn_Definition_t = 0x7FFF_FFFF;

/// `Qnn_QuantizationEncoding_t`.
pub type Qnn_QuantizationEncoding_t = u32;
/// Per-tensor scale and offset.
pub const QNN_QUANTIZATION_ENCODING_SCALE_OFFSET: Qnn_QuantizationEncoding_t = 0;
/// Per-axis scale and offset.
pub const QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET: Qnn_QuantizationEncoding_t = 1;
/// Bit-width + scale + offset.
pub const QNN_QUANTIZATION_ENCODING_BW_SCALE_OFFSET: Qnn_QuantizationEncoding_t = 2;
/// Bit-width + per-axis scales/offsets.
pub const QNN_QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET: Qnn_QuantizationEncoding_t = 3;
/// Block quantization.
pub const QNN_QUANTIZATION_ENCODING_BLOCK: Qnn_QuantizationEncoding_t = 4;
/// Blockwise expansion.
pub const QNN_QUANTIZATION_ENCODING_BLOCKWISE_EXPANSION: Qnn_QuantizationEncoding_t = 5;
/// Vector quantization.
pub const QNN_QUANTIZATION_ENCODING_VECTOR: Qnn_QuantizationEncoding_t = 6;
/// Float block encoding.
pub const QNN_QUANTIZATION_ENCODING_FLOAT_BLOCK: Qnn_QuantizationEncoding_t = 7;
/// Undefined: required for float tensors.
pub const QNN_QUANTIZATION_ENCODING_UNDEFINED: Qnn_QuantizationEncoding_t = 0x7FFF_FFFF;

/// `Qnn_ParamType_t`.
pub type Qnn_ParamType_t = u32;
/// The param carries a [`Qnn_Scalar_t`].
pub const QNN_PARAMTYPE_SCALAR: Qnn_ParamType_t = 0;
/// The param carries a [`Qnn_Tensor_t`] (a STATIC tensor created beforehand).
pub const QNN_PARAMTYPE_TENSOR: Qnn_ParamType_t = 1;
/// Undefined param type (the init value; note 0xFFFFFFFF, not 0x7FFFFFFF).
pub const QNN_PARAMTYPE_UNDEFINED: Qnn_ParamType_t = 0xFFFF_FFFF;

/// `Qnn_TensorVersion_t`.
pub type Qnn_TensorVersion_t = u32;
/// [`Qnn_TensorV1_t`].
pub const QNN_TENSOR_VERSION_1: Qnn_TensorVersion_t = 1;
/// [`Qnn_TensorV2_t`].
pub const QNN_TENSOR_VERSION_2: Qnn_TensorVersion_t = 2;
/// Undefined tensor version.
pub const QNN_TENSOR_VERSION_UNDEFINED: Qnn_TensorVersion_t = 0x7FFF_FFFF;

/// `Qnn_OpConfigVersion_t`.
pub type Qnn_OpConfigVersion_t = u32;
/// [`Qnn_OpConfigV1_t`].
pub const QNN_OPCONFIG_VERSION_1: Qnn_OpConfigVersion_t = 1;
/// Undefined op config version.
pub const QNN_OPCONFIG_VERSION_UNDEFINED: Qnn_OpConfigVersion_t = 0x7FFF_FFFF;

/// `Qnn_SparseLayoutType_t`.
pub type Qnn_SparseLayoutType_t = u32;
/// Hybrid COO sparse layout.
pub const QNN_SPARSE_LAYOUT_HYBRID_COO: Qnn_SparseLayoutType_t = 0;
/// Undefined sparse layout (the init value).
pub const QNN_SPARSE_LAYOUT_UNDEFINED: Qnn_SparseLayoutType_t = 0x7FFF_FFFF;

/// `Qnn_Precision_t` (HTP graph precision config).
pub type Qnn_Precision_t = u32;
/// Compute float ops in FP32.
pub const QNN_PRECISION_FLOAT32: Qnn_Precision_t = 0;
/// Compute float ops in FP16.
pub const QNN_PRECISION_FLOAT16: Qnn_Precision_t = 1;
/// Undefined precision.
pub const QNN_PRECISION_UNDEFINED: Qnn_Precision_t = 0x7FFF_FFFF;

/// `Qnn_Priority_t`.
pub type Qnn_Priority_t = u32;
/// Low priority.
pub const QNN_PRIORITY_LOW: Qnn_Priority_t = 0;
/// Normal (default) priority.
pub const QNN_PRIORITY_NORMAL: Qnn_Priority_t = 100;
/// Alias of [`QNN_PRIORITY_NORMAL`].
pub const QNN_PRIORITY_DEFAULT: Qnn_Priority_t = 100;
/// Normal-high priority.
pub const QNN_PRIORITY_NORMAL_HIGH: Qnn_Priority_t = 150;
/// High priority.
pub const QNN_PRIORITY_HIGH: Qnn_Priority_t = 200;
/// Undefined priority.
pub const QNN_PRIORITY_UNDEFINED: Qnn_Priority_t = 0x7FFF_FFFF;

/// `QnnProfile_Level_t` (passed to `profileCreate`).
pub type QnnProfile_Level_t = u32;
/// Basic profiling.
pub const QNN_PROFILE_LEVEL_BASIC: QnnProfile_Level_t = 1;
/// Detailed profiling.
pub const QNN_PROFILE_LEVEL_DETAILED: QnnProfile_Level_t = 2;
/// Backend-specific profiling.
pub const QNN_PROFILE_LEVEL_BACKEND: QnnProfile_Level_t = 1000;

/// Property group: core API.
pub const QNN_PROPERTY_GROUP_CORE: QnnProperty_Key_t = 1;
/// Property group: backend.
pub const QNN_PROPERTY_GROUP_BACKEND: QnnProperty_Key_t = 101;
/// Property group: context.
pub const QNN_PROPERTY_GROUP_CONTEXT: QnnProperty_Key_t = 201;
/// Property group: graph.
pub const QNN_PROPERTY_GROUP_GRAPH: QnnProperty_Key_t = 301;
/// Property group: op package.
pub const QNN_PROPERTY_GROUP_OP_PACKAGE: QnnProperty_Key_t = 401;
/// Property group: tensor.
pub const QNN_PROPERTY_GROUP_TENSOR: QnnProperty_Key_t = 501;
/// Property group: error.
pub const QNN_PROPERTY_GROUP_ERROR: QnnProperty_Key_t = 1001;
/// Property group: memory.
pub const QNN_PROPERTY_GROUP_MEMORY: QnnProperty_Key_t = 1101;
/// Property group: signal.
pub const QNN_PROPERTY_GROUP_SIGNAL: QnnProperty_Key_t = 1201;
/// Property group: log.
pub const QNN_PROPERTY_GROUP_LOG: QnnProperty_Key_t = 1301;
/// Property group: profile.
pub const QNN_PROPERTY_GROUP_PROFILE: QnnProperty_Key_t = 1401;
/// Property group: device.
pub const QNN_PROPERTY_GROUP_DEVICE: QnnProperty_Key_t = 1501;
/// Property group: custom.
pub const QNN_PROPERTY_GROUP_CUSTOM: QnnProperty_Key_t = 2001;
/// `propertyHasCapability` answer: supported.
pub const QNN_PROPERTY_SUPPORTED: Qnn_ErrorHandle_t = 0;
/// `propertyHasCapability` answer: not supported.
pub const QNN_PROPERTY_NOT_SUPPORTED: Qnn_ErrorHandle_t = 1000;
/// `propertyHasCapability` answer: unknown key.
pub const QNN_PROPERTY_ERROR_UNKNOWN_KEY: Qnn_ErrorHandle_t = 2000;

/// Backend id of the Saver backend (records calls, computes nothing).
pub const QNN_BACKEND_ID_SAVER: u32 = 2;
/// Backend id of the CPU backend.
pub const QNN_BACKEND_ID_CPU: u32 = 3;
/// Backend id of the GPU backend.
pub const QNN_BACKEND_ID_GPU: u32 = 4;
/// Backend id of the DSP backend.
pub const QNN_BACKEND_ID_DSP: u32 = 5;
/// Backend id of the HTP (Hexagon tensor processor, the NPU) backend.
pub const QNN_BACKEND_ID_HTP: u32 = 6;
/// Backend id of the HTA backend.
pub const QNN_BACKEND_ID_HTA: u32 = 7;
/// Backend id of the IR backend.
pub const QNN_BACKEND_ID_IR: u32 = 9;
/// Backend id of the LPAI backend.
pub const QNN_BACKEND_ID_LPAI: u32 = 12;

/// `QnnLog_Level_t`.
pub type QnnLog_Level_t = u32;
/// Errors only.
pub const QNN_LOG_LEVEL_ERROR: QnnLog_Level_t = 1;
/// Warnings and errors.
pub const QNN_LOG_LEVEL_WARN: QnnLog_Level_t = 2;
/// Informational messages.
pub const QNN_LOG_LEVEL_INFO: QnnLog_Level_t = 3;
/// Verbose messages.
pub const QNN_LOG_LEVEL_VERBOSE: QnnLog_Level_t = 4;
/// Debug messages.
pub const QNN_LOG_LEVEL_DEBUG: QnnLog_Level_t = 5;

/// Generic config option value shared by backend/device/context/graph configs: custom
/// (backend-specific) config behind `customConfig`.
pub const QNN_CONFIG_OPTION_CUSTOM: u32 = 0;
/// Backend config option: error reporting.
pub const QNN_BACKEND_CONFIG_OPTION_ERROR_REPORTING: u32 = 1;
/// Backend config option: platform string.
pub const QNN_BACKEND_CONFIG_OPTION_PLATFORM: u32 = 2;
/// Device config option: platform info.
pub const QNN_DEVICE_CONFIG_OPTION_PLATFORM_INFO: u32 = 1;
/// Context config option: priority.
pub const QNN_CONTEXT_CONFIG_OPTION_PRIORITY: u32 = 1;
/// Context config option: error reporting.
pub const QNN_CONTEXT_CONFIG_OPTION_ERROR_REPORTING: u32 = 2;
/// Context config option: OEM string.
pub const QNN_CONTEXT_CONFIG_OPTION_OEM_STRING: u32 = 3;
/// Context config option: async execution queue depth.
pub const QNN_CONTEXT_CONFIG_ASYNC_EXECUTION_QUEUE_DEPTH: u32 = 4;
/// Context config option: enable graphs.
pub const QNN_CONTEXT_CONFIG_ENABLE_GRAPHS: u32 = 5;
/// Context config option: memory limit hint.
pub const QNN_CONTEXT_CONFIG_MEMORY_LIMIT_HINT: u32 = 6;
/// Context config option: persistent binary.
pub const QNN_CONTEXT_CONFIG_PERSISTENT_BINARY: u32 = 7;
/// Context config option: binary compatibility.
pub const QNN_CONTEXT_CONFIG_BINARY_COMPATIBILITY: u32 = 8;
/// Context config option: defer graph init.
pub const QNN_CONTEXT_CONFIG_DEFER_GRAPH_INIT: u32 = 9;
/// Graph config option: priority.
pub const QNN_GRAPH_CONFIG_OPTION_PRIORITY: u32 = 3;
/// Graph config option: profile handle.
pub const QNN_GRAPH_CONFIG_OPTION_PROFILE_HANDLE: u32 = 4;
/// Graph config option: profiling state.
pub const QNN_GRAPH_CONFIG_OPTION_SET_PROFILING_STATE: u32 = 5;
/// Graph config option: number of profiled executions.
pub const QNN_GRAPH_CONFIG_OPTION_SET_PROFILING_NUM_EXECUTIONS: u32 = 6;
/// Undefined config option (the init value of every config wrapper).
pub const QNN_CONFIG_OPTION_UNDEFINED: u32 = 0x7FFF_FFFF;

// ---------------------------------------------------------------------------------------------
// Error codes (`Qnn_ErrorHandle_t & 0xFFFF`)
// ---------------------------------------------------------------------------------------------

/// Success.
pub const QNN_SUCCESS: Qnn_ErrorHandle_t = 0;
/// Common: API or feature not supported (e.g. `memRegister` on the simulator).
pub const QNN_COMMON_ERROR_NOT_SUPPORTED: Qnn_ErrorHandle_t = 1000;
/// Common: memory allocation failed.
pub const QNN_COMMON_ERROR_MEM_ALLOC: Qnn_ErrorHandle_t = 1002;
/// Common: system error.
pub const QNN_COMMON_ERROR_SYSTEM: Qnn_ErrorHandle_t = 1003;
/// Common: invalid argument.
pub const QNN_COMMON_ERROR_INVALID_ARGUMENT: Qnn_ErrorHandle_t = 1004;
/// Common: operation not permitted.
pub const QNN_COMMON_ERROR_OPERATION_NOT_PERMITTED: Qnn_ErrorHandle_t = 1005;
/// Common: platform not supported.
pub const QNN_COMMON_ERROR_PLATFORM_NOT_SUPPORTED: Qnn_ErrorHandle_t = 1006;
/// Common: system communication error.
pub const QNN_COMMON_ERROR_SYSTEM_COMMUNICATION: Qnn_ErrorHandle_t = 1007;
/// Common: incompatible binaries.
pub const QNN_COMMON_ERROR_INCOMPATIBLE_BINARIES: Qnn_ErrorHandle_t = 1008;
/// Common: loading binaries failed.
pub const QNN_COMMON_ERROR_LOADING_BINARIES: Qnn_ErrorHandle_t = 1009;
/// Common: resource unavailable.
pub const QNN_COMMON_ERROR_RESOURCE_UNAVAILABLE: Qnn_ErrorHandle_t = 1010;
/// Common: fatal system communication error.
pub const QNN_COMMON_ERROR_SYSTEM_COMMUNICATION_FATAL: Qnn_ErrorHandle_t = 1011;
/// Common: general error.
pub const QNN_COMMON_ERROR_GENERAL: Qnn_ErrorHandle_t = 1100;
/// Backend: cannot initialize.
pub const QNN_BACKEND_ERROR_CANNOT_INITIALIZE: Qnn_ErrorHandle_t = 4000;
/// Backend: terminate failed.
pub const QNN_BACKEND_ERROR_TERMINATE_FAILED: Qnn_ErrorHandle_t = 4002;
/// Backend: not supported.
pub const QNN_BACKEND_ERROR_NOT_SUPPORTED: Qnn_ErrorHandle_t = 4003;
/// Backend: invalid argument.
pub const QNN_BACKEND_ERROR_INVALID_ARGUMENT: Qnn_ErrorHandle_t = 4004;
/// Backend: op package not found.
pub const QNN_BACKEND_ERROR_OP_PACKAGE_NOT_FOUND: Qnn_ErrorHandle_t = 4005;
/// Backend: invalid handle.
pub const QNN_BACKEND_ERROR_INVALID_HANDLE: Qnn_ErrorHandle_t = 4011;
/// Backend: invalid config.
pub const QNN_BACKEND_ERROR_INVALID_CONFIG: Qnn_ErrorHandle_t = 4012;
/// Context: invalid argument.
pub const QNN_CONTEXT_ERROR_INVALID_ARGUMENT: Qnn_ErrorHandle_t = 5000;
/// Context: invalid handle.
pub const QNN_CONTEXT_ERROR_INVALID_HANDLE: Qnn_ErrorHandle_t = 5002;
/// Context: invalid config.
pub const QNN_CONTEXT_ERROR_INVALID_CONFIG: Qnn_ErrorHandle_t = 5010;
/// Graph: invalid argument.
pub const QNN_GRAPH_ERROR_INVALID_ARGUMENT: Qnn_ErrorHandle_t = 6000;
/// Graph: invalid handle.
pub const QNN_GRAPH_ERROR_INVALID_HANDLE: Qnn_ErrorHandle_t = 6001;
/// Graph: graph does not exist.
pub const QNN_GRAPH_ERROR_GRAPH_DOES_NOT_EXIST: Qnn_ErrorHandle_t = 6002;
/// Graph: invalid name.
pub const QNN_GRAPH_ERROR_INVALID_NAME: Qnn_ErrorHandle_t = 6003;
/// Graph: invalid tensor.
pub const QNN_GRAPH_ERROR_INVALID_TENSOR: Qnn_ErrorHandle_t = 6004;
/// Graph: invalid op config (e.g. a tensor array with the wrong stride).
pub const QNN_GRAPH_ERROR_INVALID_OP_CONFIG: Qnn_ErrorHandle_t = 6005;
/// Graph: unconnected node (also: zeroed quantize params on float tensors).
pub const QNN_GRAPH_ERROR_UNCONNECTED_NODE: Qnn_ErrorHandle_t = 6007;
/// Graph: creation failed.
pub const QNN_GRAPH_ERROR_CREATE_FAILED: Qnn_ErrorHandle_t = 6020;
/// Graph: optimization failed.
pub const QNN_GRAPH_ERROR_OPTIMIZATION_FAILED: Qnn_ErrorHandle_t = 6021;
/// Graph: finalize failed.
pub const QNN_GRAPH_ERROR_FINALIZE_FAILED: Qnn_ErrorHandle_t = 6022;
/// Graph: not finalized.
pub const QNN_GRAPH_ERROR_GRAPH_NOT_FINALIZED: Qnn_ErrorHandle_t = 6023;
/// Graph: already finalized.
pub const QNN_GRAPH_ERROR_GRAPH_FINALIZED: Qnn_ErrorHandle_t = 6024;
/// Tensor: invalid handle.
pub const QNN_TENSOR_ERROR_INVALID_HANDLE: Qnn_ErrorHandle_t = 7001;
/// Tensor: does not exist.
pub const QNN_TENSOR_ERROR_DOES_NOT_EXIST: Qnn_ErrorHandle_t = 7002;
/// Tensor: already exists.
pub const QNN_TENSOR_ERROR_ALREADY_EXISTS: Qnn_ErrorHandle_t = 7003;
/// Tensor: invalid tensor param.
pub const QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM: Qnn_ErrorHandle_t = 7004;
/// Tensor: unsupported tensor param.
pub const QNN_TENSOR_ERROR_UNSUPPORTED_TENSOR_PARAM: Qnn_ErrorHandle_t = 7005;
/// Memory: invalid argument.
pub const QNN_MEM_ERROR_INVALID_ARGUMENT: Qnn_ErrorHandle_t = 8000;
/// Memory: invalid handle.
pub const QNN_MEM_ERROR_INVALID_HANDLE: Qnn_ErrorHandle_t = 8001;
/// Log: initialization failed.
pub const QNN_LOG_ERROR_INITIALIZATION: Qnn_ErrorHandle_t = 11002;
/// Device: invalid handle.
pub const QNN_DEVICE_ERROR_INVALID_HANDLE: Qnn_ErrorHandle_t = 14000;
/// Device: invalid config (e.g. an HTP device custom config in the wrong layout).
pub const QNN_DEVICE_ERROR_INVALID_CONFIG: Qnn_ErrorHandle_t = 14001;
/// Device: hardware unavailable.
pub const QNN_DEVICE_ERROR_HARDWARE_UNAVAILABLE: Qnn_ErrorHandle_t = 14002;

// ---------------------------------------------------------------------------------------------
// Scalars, quantization, buffers, tensors
// ---------------------------------------------------------------------------------------------

/// The value union of [`Qnn_Scalar_t`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union Qnn_ScalarValue_t {
    /// FLOAT_32 value.
    pub floatValue: f32,
    /// FLOAT_64 value.
    pub doubleValue: f64,
    /// UINT_64 value.
    pub uint64Value: u64,
    /// INT_64 value.
    pub int64Value: i64,
    /// UINT_32 value.
    pub uint32Value: u32,
    /// INT_32 value.
    pub int32Value: i32,
    /// UINT_16 value.
    pub uint16Value: u16,
    /// INT_16 value.
    pub int16Value: i16,
    /// UINT_8 value.
    pub uint8Value: u8,
    /// INT_8 value.
    pub int8Value: i8,
    /// BOOL_8 value (0 or 1).
    pub bool8Value: u8,
    /// BFLOAT_16 value (bit pattern).
    pub bfloat16Value: i16,
    /// STRING value.
    pub stringValue: *const c_char,
}

/// `Qnn_Scalar_t`: a typed scalar (16 B; the value is at offset 8).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Qnn_Scalar_t {
    /// Which member of `value` is meaningful.
    pub dataType: Qnn_DataType_t,
    /// The value.
    pub value: Qnn_ScalarValue_t,
}

/// `Qnn_ScaleOffset_t`: `real = scale * (q + offset)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Qnn_ScaleOffset_t {
    /// Scale.
    pub scale: f32,
    /// Offset (usually <= 0).
    pub offset: i32,
}

/// `Qnn_AxisScaleOffset_t`: per-axis scales and offsets.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Qnn_AxisScaleOffset_t {
    /// Quantized axis.
    pub axis: i32,
    /// Number of entries behind `scaleOffset`.
    pub numScaleOffsets: u32,
    /// Array of `numScaleOffsets` entries.
    pub scaleOffset: *mut Qnn_ScaleOffset_t,
}

/// `Qnn_BwScaleOffset_t`: bit width + scale + offset.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Qnn_BwScaleOffset_t {
    /// Bit width.
    pub bitwidth: u32,
    /// Scale.
    pub scale: f32,
    /// Offset.
    pub offset: i32,
}

/// `Qnn_BwAxisScaleOffset_t`: bit width + per-axis scales/offsets (the largest encoding, 32 B).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Qnn_BwAxisScaleOffset_t {
    /// Bit width.
    pub bitwidth: u32,
    /// Quantized axis.
    pub axis: i32,
    /// Number of elements in `scales`/`offsets`.
    pub numElements: u32,
    /// Scales.
    pub scales: *mut f32,
    /// Offsets (may be NULL: all zero).
    pub offsets: *mut i32,
}

/// `Qnn_BlockEncoding_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Qnn_BlockEncoding_t {
    /// Block sizes, one per dimension.
    pub blockSize: *mut u32,
    /// Scales and offsets, one per block.
    pub scaleOffset: *mut Qnn_ScaleOffset_t,
}

/// Float block encoding (`floatBlockEncoding`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Qnn_FloatBlockEncoding_t {
    /// Block sizes.
    pub blockSize: *mut u32,
    /// Float scale/offset data (layout not bound).
    pub floatScaleOffset: *mut c_void,
}

/// Bit width + float block encoding (`bwFloatBlockEncoding`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Qnn_BwFloatBlockEncoding_t {
    /// Bit width.
    pub bitwidth: u32,
    /// Block sizes.
    pub blockSize: *mut u32,
    /// Float scale/offset data (layout not bound).
    pub floatScaleOffset: *mut c_void,
}

/// The encoding union of [`Qnn_QuantizeParams_t`] (32 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub union Qnn_QuantizeParamsEncoding_t {
    /// SCALE_OFFSET.
    pub scaleOffsetEncoding: Qnn_ScaleOffset_t,
    /// AXIS_SCALE_OFFSET.
    pub axisScaleOffsetEncoding: Qnn_AxisScaleOffset_t,
    /// BW_SCALE_OFFSET.
    pub bwScaleOffsetEncoding: Qnn_BwScaleOffset_t,
    /// BW_AXIS_SCALE_OFFSET.
    pub bwAxisScaleOffsetEncoding: Qnn_BwAxisScaleOffset_t,
    /// BLOCK.
    pub blockEncoding: Qnn_BlockEncoding_t,
    /// BLOCKWISE_EXPANSION (pointer to a struct whose layout is not bound).
    pub blockwiseExpansion: *mut c_void,
    /// VECTOR (pointer to a struct whose layout is not bound).
    pub vectorEncoding: *mut c_void,
    /// BW_AXIS_SCALE_OFFSET_MAPPED (pointer; layout not bound).
    pub bwAxisScaleOffsetMappedEncoding: *mut c_void,
    /// BW_BLOCK_MAPPED (pointer; layout not bound).
    pub bwBlockMappedEncoding: *mut c_void,
    /// BW_BLOCKWISE_EXPANSION_MAPPED (pointer; layout not bound).
    pub bwBlockwiseExpansionMappedEncoding: *mut c_void,
    /// FLOAT_BLOCK.
    pub floatBlockEncoding: Qnn_FloatBlockEncoding_t,
    /// BW_FLOAT_BLOCK.
    pub bwFloatBlockEncoding: Qnn_BwFloatBlockEncoding_t,
}

/// `Qnn_QuantizeParams_t` (40 B). Float tensors need [`Qnn_QuantizeParams_t::UNDEFINED`].
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Qnn_QuantizeParams_t {
    /// [`Qnn_Definition_t`].
    pub encodingDefinition: Qnn_Definition_t,
    /// [`Qnn_QuantizationEncoding_t`].
    pub quantizationEncoding: Qnn_QuantizationEncoding_t,
    /// The encoding named by `quantizationEncoding`.
    pub encoding: Qnn_QuantizeParamsEncoding_t,
}

impl Qnn_QuantizeParams_t {
    /// The init value (`QNN_QUANTIZE_PARAMS_INIT`): both enums UNDEFINED. Required for float
    /// tensors; an all-zero value makes `graphAddNode` fail with 6007.
    pub const UNDEFINED: Self = Self {
        encodingDefinition: QNN_DEFINITION_UNDEFINED,
        quantizationEncoding: QNN_QUANTIZATION_ENCODING_UNDEFINED,
        encoding: Qnn_QuantizeParamsEncoding_t {
            bwAxisScaleOffsetEncoding: Qnn_BwAxisScaleOffset_t {
                bitwidth: 0,
                axis: 0,
                numElements: 0,
                scales: core::ptr::null_mut(),
                offsets: core::ptr::null_mut(),
            },
        },
    };
}

/// `Qnn_ClientBuffer_t`: caller-owned memory of a RAW tensor. QNN does not check `dataSize`
/// against the dimensions (verified on the simulator); callers must.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Qnn_ClientBuffer_t {
    /// Start of the data.
    pub data: *mut c_void,
    /// Size in bytes.
    pub dataSize: u32,
}

impl Qnn_ClientBuffer_t {
    /// `{NULL, 0}`.
    pub const EMPTY: Self = Self {
        data: core::ptr::null_mut(),
        dataSize: 0,
    };
}

/// The memory union of a tensor (`clientBuf` for RAW, `memHandle` for MEMHANDLE).
#[repr(C)]
#[derive(Clone, Copy)]
pub union Qnn_TensorMem_t {
    /// RAW: client buffer.
    pub clientBuf: Qnn_ClientBuffer_t,
    /// MEMHANDLE: registered memory.
    pub memHandle: Qnn_MemHandle_t,
    /// RETRIEVE_RAW (V2 tensors only): pointer to a retrieve-raw descriptor (layout not bound).
    pub retrieveRaw: *mut c_void,
}

/// `Qnn_TensorV1_t` (112 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Qnn_TensorV1_t {
    /// Written by the backend in `tensorCreate*Tensor`; tensors are matched by id afterwards.
    pub id: u32,
    /// Unique name within the graph.
    pub name: *const c_char,
    /// [`Qnn_TensorType_t`].
    pub type_: Qnn_TensorType_t,
    /// [`Qnn_TensorDataFormat_t`].
    pub dataFormat: Qnn_TensorDataFormat_t,
    /// [`Qnn_DataType_t`].
    pub dataType: Qnn_DataType_t,
    /// Quantization (UNDEFINED for float tensors).
    pub quantizeParams: Qnn_QuantizeParams_t,
    /// Number of dimensions.
    pub rank: u32,
    /// `rank` dimensions, outermost first.
    pub dimensions: *mut u32,
    /// [`Qnn_TensorMemType_t`].
    pub memType: Qnn_TensorMemType_t,
    /// Memory selected by `memType`.
    pub mem: Qnn_TensorMem_t,
}

/// `Qnn_SparseLayoutHybridCoo_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Qnn_SparseLayoutHybridCoo_t {
    /// Number of specified elements.
    pub numSpecifiedElements: u32,
    /// Number of sparse dimensions.
    pub numSparseDimensions: u32,
}

/// `Qnn_SparseParams_t` (12 B).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Qnn_SparseParams_t {
    /// [`Qnn_SparseLayoutType_t`].
    pub type_: Qnn_SparseLayoutType_t,
    /// Hybrid COO parameters.
    pub hybridCoo: Qnn_SparseLayoutHybridCoo_t,
}

impl Qnn_SparseParams_t {
    /// The init value: UNDEFINED layout.
    pub const UNDEFINED: Self = Self {
        type_: QNN_SPARSE_LAYOUT_UNDEFINED,
        hybridCoo: Qnn_SparseLayoutHybridCoo_t {
            numSpecifiedElements: 0,
            numSparseDimensions: 0,
        },
    };
}

/// `Qnn_TensorV2_t` (136 B): the V1 fields at the same offsets, then three more.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Qnn_TensorV2_t {
    /// Written by the backend in `tensorCreate*Tensor`.
    pub id: u32,
    /// Unique name within the graph.
    pub name: *const c_char,
    /// [`Qnn_TensorType_t`].
    pub type_: Qnn_TensorType_t,
    /// [`Qnn_TensorDataFormat_t`].
    pub dataFormat: Qnn_TensorDataFormat_t,
    /// [`Qnn_DataType_t`].
    pub dataType: Qnn_DataType_t,
    /// Quantization (UNDEFINED for float tensors).
    pub quantizeParams: Qnn_QuantizeParams_t,
    /// Number of dimensions.
    pub rank: u32,
    /// `rank` dimensions, outermost first.
    pub dimensions: *mut u32,
    /// [`Qnn_TensorMemType_t`].
    pub memType: Qnn_TensorMemType_t,
    /// Memory selected by `memType`.
    pub mem: Qnn_TensorMem_t,
    /// `rank` flags (NULL: every dimension static).
    pub isDynamicDimensions: *mut u8,
    /// Sparse layout (UNDEFINED for dense tensors).
    pub sparseParams: Qnn_SparseParams_t,
    /// Whether the tensor was produced (output tensors with dynamic producers).
    pub isProduced: u8,
}

/// The version union of [`Qnn_Tensor_t`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union Qnn_TensorUnion_t {
    /// Version 1.
    pub v1: Qnn_TensorV1_t,
    /// Version 2.
    pub v2: Qnn_TensorV2_t,
}

/// `Qnn_Tensor_t` (144 B): **the stride of every tensor array** the library reads.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Qnn_Tensor_t {
    /// [`Qnn_TensorVersion_t`].
    pub version: Qnn_TensorVersion_t,
    /// The tensor, as `v1` or `v2`.
    pub u: Qnn_TensorUnion_t,
}

impl Qnn_Tensor_t {
    /// A V2 tensor with the init defaults (`QNN_TENSOR_V2_INIT`): UNDEFINED type, data type,
    /// memory type, quantization and sparse layout, dense format, no dimensions, no data.
    pub const V2_INIT: Self = Self {
        version: QNN_TENSOR_VERSION_2,
        u: Qnn_TensorUnion_t {
            v2: Qnn_TensorV2_t {
                id: 0,
                name: core::ptr::null(),
                type_: QNN_TENSOR_TYPE_UNDEFINED,
                dataFormat: QNN_TENSOR_DATA_FORMAT_DENSE,
                dataType: QNN_DATATYPE_UNDEFINED,
                quantizeParams: Qnn_QuantizeParams_t::UNDEFINED,
                rank: 0,
                dimensions: core::ptr::null_mut(),
                memType: QNN_TENSORMEMTYPE_UNDEFINED,
                mem: Qnn_TensorMem_t {
                    clientBuf: Qnn_ClientBuffer_t::EMPTY,
                },
                isDynamicDimensions: core::ptr::null_mut(),
                sparseParams: Qnn_SparseParams_t::UNDEFINED,
                isProduced: 0,
            },
        },
    };

    /// A V1 tensor with the init defaults (`QNN_TENSOR_INIT`).
    pub const V1_INIT: Self = Self {
        version: QNN_TENSOR_VERSION_1,
        u: Qnn_TensorUnion_t {
            v1: Qnn_TensorV1_t {
                id: 0,
                name: core::ptr::null(),
                type_: QNN_TENSOR_TYPE_UNDEFINED,
                dataFormat: QNN_TENSOR_DATA_FORMAT_DENSE,
                dataType: QNN_DATATYPE_UNDEFINED,
                quantizeParams: Qnn_QuantizeParams_t::UNDEFINED,
                rank: 0,
                dimensions: core::ptr::null_mut(),
                memType: QNN_TENSORMEMTYPE_UNDEFINED,
                mem: Qnn_TensorMem_t {
                    clientBuf: Qnn_ClientBuffer_t::EMPTY,
                },
            },
        },
    };
}

impl core::fmt::Debug for Qnn_Tensor_t {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // SAFETY: id and the header fields sit at the same offsets in V1 and V2 and are
        // initialized in both.
        let (id, ty, dt) = unsafe { (self.u.v1.id, self.u.v1.type_, self.u.v1.dataType) };
        write!(
            f,
            "Qnn_Tensor_t {{ version: {}, id: {id}, type: {ty}, dataType: {dt:#x} }}",
            self.version
        )
    }
}

/// The value union of [`Qnn_Param_t`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union Qnn_ParamValue_t {
    /// SCALAR.
    pub scalarParam: Qnn_Scalar_t,
    /// TENSOR (a STATIC tensor created beforehand, id set).
    pub tensorParam: Qnn_Tensor_t,
}

/// `Qnn_Param_t` (160 B): a named op parameter.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Qnn_Param_t {
    /// [`Qnn_ParamType_t`].
    pub paramType: Qnn_ParamType_t,
    /// Parameter name, e.g. `"transpose_in1"`.
    pub name: *const c_char,
    /// The value named by `paramType`.
    pub u: Qnn_ParamValue_t,
}

/// `Qnn_OpConfigV1_t` (72 B).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Qnn_OpConfigV1_t {
    /// Node name, unique in the graph.
    pub name: *const c_char,
    /// Op package, e.g. `"qti.aisw"`.
    pub packageName: *const c_char,
    /// Op type, e.g. `"MatMul"`.
    pub typeName: *const c_char,
    /// Number of params.
    pub numOfParams: u32,
    /// Params (stride 160).
    pub params: *mut Qnn_Param_t,
    /// Number of inputs.
    pub numOfInputs: u32,
    /// Inputs (stride 144), as returned by `tensorCreateGraphTensor` (id set).
    pub inputTensors: *mut Qnn_Tensor_t,
    /// Number of outputs.
    pub numOfOutputs: u32,
    /// Outputs (stride 144).
    pub outputTensors: *mut Qnn_Tensor_t,
}

/// `Qnn_OpConfig_t` (80 B), passed **by value** to `graphAddNode`/`backendValidateOpConfig`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Qnn_OpConfig_t {
    /// [`Qnn_OpConfigVersion_t`].
    pub version: Qnn_OpConfigVersion_t,
    /// The version-1 config (the C union has only this member).
    pub v1: Qnn_OpConfigV1_t,
}

/// `Qnn_NotifyStatus_t`, passed by value to a [`Qnn_NotifyFn_t`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Qnn_NotifyStatus_t {
    /// The result of the asynchronous execution.
    pub error: Qnn_ErrorHandle_t,
}

/// Completion callback of `graphExecuteAsync`.
pub type Qnn_NotifyFn_t =
    Option<unsafe extern "C" fn(notifyParam: *mut c_void, status: Qnn_NotifyStatus_t)>;

/// Log callback of `logCreate`. The C type passes a `va_list`; on x86-64 SysV and aarch64
/// Linux/Android it arrives as a pointer, which is what `args` is (invalid on Apple/Windows).
/// The callback may be called from several threads at once.
pub type QnnLog_Callback_t = Option<
    unsafe extern "C" fn(
        fmt: *const c_char,
        level: QnnLog_Level_t,
        timestamp: u64,
        args: *mut c_void,
    ),
>;

// ---------------------------------------------------------------------------------------------
// Config wrappers (passed as NULL-terminated arrays of pointers)
// ---------------------------------------------------------------------------------------------

/// `errorConfig` member of [`QnnBackend_Config_t`]/[`QnnContext_Config_t`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Qnn_ErrorReportingConfig_t {
    /// Reporting level.
    pub reportingLevel: u32,
    /// Storage limit (KiB).
    pub storageLimit: u32,
}

/// Union of [`QnnBackend_Config_t`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union QnnBackend_ConfigValue_t {
    /// CUSTOM: backend-specific config.
    pub customConfig: *mut c_void,
    /// ERROR_REPORTING.
    pub errorConfig: Qnn_ErrorReportingConfig_t,
    /// PLATFORM.
    pub platformOption: *const c_char,
}

/// `QnnBackend_Config_t` (16 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct QnnBackend_Config_t {
    /// Which member of `u` is meaningful.
    pub option: u32,
    /// The value.
    pub u: QnnBackend_ConfigValue_t,
}

/// Union of [`QnnDevice_Config_t`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union QnnDevice_ConfigValue_t {
    /// CUSTOM: pointer to an HTP device custom config ([`QnnHtpDevice_CustomConfig_t`] or
    /// [`QnnHtpDevice_CustomConfigLegacy_t`], chosen by the backend API version).
    pub customConfig: *mut c_void,
    /// PLATFORM_INFO.
    pub hardwareInfo: *mut QnnDevice_PlatformInfo_t,
}

/// `QnnDevice_Config_t` (16 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct QnnDevice_Config_t {
    /// Which member of `u` is meaningful.
    pub option: u32,
    /// The value.
    pub u: QnnDevice_ConfigValue_t,
}

/// Union of [`QnnContext_Config_t`] (only the members used here are named).
#[repr(C)]
#[derive(Clone, Copy)]
pub union QnnContext_ConfigValue_t {
    /// CUSTOM: pointer to a [`QnnHtpContext_CustomConfig_t`].
    pub customConfig: *mut c_void,
    /// PRIORITY.
    pub priority: Qnn_Priority_t,
    /// ERROR_REPORTING.
    pub errorConfig: Qnn_ErrorReportingConfig_t,
    /// OEM_STRING.
    pub oemString: *const c_char,
    /// Any other 8-byte member.
    pub raw: u64,
}

/// `QnnContext_Config_t` (16 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct QnnContext_Config_t {
    /// Which member of `u` is meaningful.
    pub option: u32,
    /// The value.
    pub u: QnnContext_ConfigValue_t,
}

/// Union of [`QnnGraph_Config_t`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union QnnGraph_ConfigValue_t {
    /// CUSTOM: pointer to a [`QnnHtpGraph_CustomConfig_t`].
    pub customConfig: *mut c_void,
    /// PRIORITY.
    pub priority: Qnn_Priority_t,
    /// PROFILE_HANDLE.
    pub profileHandle: Qnn_ProfileHandle_t,
    /// SET_PROFILING_STATE.
    pub profilingState: u32,
    /// SET_PROFILING_NUM_EXECUTIONS.
    pub numProfilingExecutions: u32,
    /// Any other 8-byte member.
    pub raw: u64,
}

/// `QnnGraph_Config_t` (16 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct QnnGraph_Config_t {
    /// Which member of `u` is meaningful.
    pub option: u32,
    /// The value.
    pub u: QnnGraph_ConfigValue_t,
}

// ---------------------------------------------------------------------------------------------
// Memory registration and platform info
// ---------------------------------------------------------------------------------------------

/// `Qnn_MemShape_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Qnn_MemShape_t {
    /// Number of dimensions.
    pub numDim: u32,
    /// Dimensions.
    pub dimSize: *mut u32,
    /// Backend-specific shape string (may be NULL).
    pub shapeConfig: *const c_char,
}

/// DMA-BUF member of [`Qnn_MemDescriptor_t`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Qnn_MemDmaBufInfo_t {
    /// File descriptor.
    pub fd: i32,
    /// Mapped address.
    pub data: *mut c_void,
}

/// Union of [`Qnn_MemDescriptor_t`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union Qnn_MemDescriptorValue_t {
    /// ION: file descriptor.
    pub ionFd: i32,
    /// CUSTOM: backend-specific info.
    pub customInfo: *mut c_void,
    /// DMA_BUF.
    pub dmaBufInfo: Qnn_MemDmaBufInfo_t,
}

/// `Qnn_MemType_t` for [`Qnn_MemDescriptor_t::memType`].
pub type Qnn_MemType_t = u32;
/// ION memory.
pub const QNN_MEM_TYPE_ION: Qnn_MemType_t = 1;
/// Backend-specific memory.
pub const QNN_MEM_TYPE_CUSTOM: Qnn_MemType_t = 2;
/// DMA-BUF memory.
pub const QNN_MEM_TYPE_DMA_BUF: Qnn_MemType_t = 3;
/// Undefined.
pub const QNN_MEM_TYPE_UNDEFINED: Qnn_MemType_t = 0x7FFF_FFFF;

/// `Qnn_MemDescriptor_t` (48 B), for `memRegister` (unsupported on the x86 simulator: 1000).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Qnn_MemDescriptor_t {
    /// Shape of the registered memory.
    pub memShape: Qnn_MemShape_t,
    /// [`Qnn_DataType_t`].
    pub dataType: Qnn_DataType_t,
    /// [`Qnn_MemType_t`].
    pub memType: Qnn_MemType_t,
    /// The memory.
    pub u: Qnn_MemDescriptorValue_t,
}

/// `QnnDevice_HardwareDeviceInfoV1_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct QnnDevice_HardwareDeviceInfoV1_t {
    /// Device id.
    pub deviceId: u32,
    /// Device type.
    pub deviceType: u32,
    /// Number of cores.
    pub numCores: u32,
    /// Core descriptions.
    pub cores: *mut QnnDevice_CoreInfo_t,
    /// Backend-specific extension (HTP: [`QnnHtpDevice_DeviceInfoExtension_t`]).
    pub deviceInfoExtension: *mut c_void,
}

/// `QnnDevice_HardwareDeviceInfo_t` (40 B).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct QnnDevice_HardwareDeviceInfo_t {
    /// Version (1).
    pub version: u32,
    /// Version 1 info.
    pub v1: QnnDevice_HardwareDeviceInfoV1_t,
}

/// `QnnDevice_PlatformInfoV1_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct QnnDevice_PlatformInfoV1_t {
    /// Number of hardware devices.
    pub numHwDevices: u32,
    /// Array of `numHwDevices` devices.
    pub hwDevices: *mut QnnDevice_HardwareDeviceInfo_t,
}

/// `QnnDevice_PlatformInfo_t` (24 B).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct QnnDevice_PlatformInfo_t {
    /// Version (1).
    pub version: u32,
    /// Version 1 info.
    pub v1: QnnDevice_PlatformInfoV1_t,
}

/// `onChipDevice` member of [`QnnHtpDevice_DeviceInfoExtension_t`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct QnnHtpDevice_OnChipDeviceInfoExtension_t {
    /// VTCM size in MB.
    pub vtcmSize: usize,
    /// SoC model (e.g. 69 = SM8750).
    pub socModel: u32,
    /// Signed PD supported.
    pub signedPdSupport: u8,
    /// DLBC supported.
    pub dlbcSupport: u8,
    /// HTP architecture (e.g. 79).
    pub arch: u32,
}

/// `QnnHtpDevice_DeviceInfoExtension_t` (32 B).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct QnnHtpDevice_DeviceInfoExtension_t {
    /// Device type (0 = on chip).
    pub devType: u32,
    /// On-chip device info.
    pub onChipDevice: QnnHtpDevice_OnChipDeviceInfoExtension_t,
}

// ---------------------------------------------------------------------------------------------
// HTP custom configs
// ---------------------------------------------------------------------------------------------

/// `QnnHtpDevice_ConfigOption_t`.
pub type QnnHtpDevice_ConfigOption_t = u32;
/// SoC model (preferred; takes precedence over ARCH).
pub const QNN_HTP_DEVICE_CONFIG_OPTION_SOC: QnnHtpDevice_ConfigOption_t = 0;
/// HTP architecture (deprecated in favour of SOC).
pub const QNN_HTP_DEVICE_CONFIG_OPTION_ARCH: QnnHtpDevice_ConfigOption_t = 1;
/// Signed process domain.
pub const QNN_HTP_DEVICE_CONFIG_OPTION_SIGNEDPD: QnnHtpDevice_ConfigOption_t = 2;
/// Secure process domain.
pub const QNN_HTP_DEVICE_CONFIG_OPTION_SECUREPD: QnnHtpDevice_ConfigOption_t = 3;
/// Async execute (HTP API >= 5.47 only).
pub const QNN_HTP_DEVICE_CONFIG_OPTION_ASYNC_EXECUTE: QnnHtpDevice_ConfigOption_t = 4;
/// HTP extension pointer (HTP API >= 5.47 only).
pub const QNN_HTP_DEVICE_CONFIG_OPTION_HTP_EXTENSION: QnnHtpDevice_ConfigOption_t = 0x7fff_0000;
/// Unknown option (the init value).
pub const QNN_HTP_DEVICE_CONFIG_OPTION_UNKNOWN: QnnHtpDevice_ConfigOption_t = 0x7fff_ffff;

/// `QnnHtpDevice_Arch_t`.
pub type QnnHtpDevice_Arch_t = u32;
/// No architecture.
pub const QNN_HTP_DEVICE_ARCH_NONE: QnnHtpDevice_Arch_t = 0;
/// Hexagon v68.
pub const QNN_HTP_DEVICE_ARCH_V68: QnnHtpDevice_Arch_t = 68;
/// Hexagon v69.
pub const QNN_HTP_DEVICE_ARCH_V69: QnnHtpDevice_Arch_t = 69;
/// Hexagon v73.
pub const QNN_HTP_DEVICE_ARCH_V73: QnnHtpDevice_Arch_t = 73;
/// Hexagon v75.
pub const QNN_HTP_DEVICE_ARCH_V75: QnnHtpDevice_Arch_t = 75;
/// Hexagon v79.
pub const QNN_HTP_DEVICE_ARCH_V79: QnnHtpDevice_Arch_t = 79;
/// Hexagon v81.
pub const QNN_HTP_DEVICE_ARCH_V81: QnnHtpDevice_Arch_t = 81;
/// Hexagon v85.
pub const QNN_HTP_DEVICE_ARCH_V85: QnnHtpDevice_Arch_t = 85;

/// `arch` member of the HTP device custom config.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct QnnHtpDevice_DeviceArch_t {
    /// Device id.
    pub deviceId: u32,
    /// [`QnnHtpDevice_Arch_t`].
    pub arch: QnnHtpDevice_Arch_t,
}

/// A `{deviceId, flag}` member of the HTP device custom config (signed/secure PD, async).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct QnnHtpDevice_DeviceFlag_t {
    /// Device id.
    pub deviceId: u32,
    /// The flag (C `bool`).
    pub flag: u8,
}

/// Union of [`QnnHtpDevice_CustomConfigLegacy_t`] (32-bit members only: 8 B, align 4).
#[repr(C)]
#[derive(Clone, Copy)]
pub union QnnHtpDevice_CustomConfigLegacyValue_t {
    /// SOC.
    pub socModel: u32,
    /// ARCH.
    pub arch: QnnHtpDevice_DeviceArch_t,
    /// SIGNEDPD.
    pub useSignedProcessDomain: QnnHtpDevice_DeviceFlag_t,
    /// SECUREPD.
    pub useSecureProcessDomain: QnnHtpDevice_DeviceFlag_t,
}

/// `QnnHtpDevice_CustomConfig_t` as laid out by HTP API <= 5.46 (QAIRT <= 2.46):
/// union at offset 4, 12 B. Using it with a >= 5.47 backend fails (SOC: 14001) or is ignored
/// (ARCH); choose with [`crate::HtpDeviceConfig`].
#[repr(C)]
#[derive(Clone, Copy)]
pub struct QnnHtpDevice_CustomConfigLegacy_t {
    /// [`QnnHtpDevice_ConfigOption_t`].
    pub option: QnnHtpDevice_ConfigOption_t,
    /// The value.
    pub u: QnnHtpDevice_CustomConfigLegacyValue_t,
}

/// Union of [`QnnHtpDevice_CustomConfig_t`] (gained a pointer member at 5.47: 8 B, align 8).
#[repr(C)]
#[derive(Clone, Copy)]
pub union QnnHtpDevice_CustomConfigValue_t {
    /// SOC.
    pub socModel: u32,
    /// ARCH.
    pub arch: QnnHtpDevice_DeviceArch_t,
    /// SIGNEDPD.
    pub useSignedProcessDomain: QnnHtpDevice_DeviceFlag_t,
    /// SECUREPD.
    pub useSecureProcessDomain: QnnHtpDevice_DeviceFlag_t,
    /// ASYNC_EXECUTE.
    pub asyncExecute: QnnHtpDevice_DeviceFlag_t,
    /// HTP_EXTENSION.
    pub htpExtension: *mut c_void,
}

/// `QnnHtpDevice_CustomConfig_t` as laid out by HTP API >= 5.47 (QAIRT >= 2.47, e.g. the
/// simulator's 5.51): union at offset 8, 16 B.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct QnnHtpDevice_CustomConfig_t {
    /// [`QnnHtpDevice_ConfigOption_t`].
    pub option: QnnHtpDevice_ConfigOption_t,
    /// The value.
    pub u: QnnHtpDevice_CustomConfigValue_t,
}

/// `QnnHtpGraph_ConfigOption_t`.
pub type QnnHtpGraph_ConfigOption_t = u32;
/// Optimization option ([`QnnHtpGraph_OptimizationOption_t`]).
pub const QNN_HTP_GRAPH_CONFIG_OPTION_OPTIMIZATION: QnnHtpGraph_ConfigOption_t = 1;
/// Float precision ([`Qnn_Precision_t`]).
pub const QNN_HTP_GRAPH_CONFIG_OPTION_PRECISION: QnnHtpGraph_ConfigOption_t = 2;
/// VTCM size in MB.
pub const QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE_IN_MB: QnnHtpGraph_ConfigOption_t = 3;
/// Number of HVX threads.
pub const QNN_HTP_GRAPH_CONFIG_OPTION_NUM_HVX_THREADS: QnnHtpGraph_ConfigOption_t = 6;
/// Number of HTP cores.
pub const QNN_HTP_GRAPH_CONFIG_OPTION_NUM_CORES: QnnHtpGraph_ConfigOption_t = 8;
/// VTCM size in bytes.
pub const QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE_IN_BYTES: QnnHtpGraph_ConfigOption_t = 10;
/// Unknown option (the init value).
pub const QNN_HTP_GRAPH_CONFIG_OPTION_UNKNOWN: QnnHtpGraph_ConfigOption_t = 0x7fff_ffff;

/// `QnnHtpGraph_OptimizationType_t`.
pub type QnnHtpGraph_OptimizationType_t = u32;
/// Schedule threshold.
pub const QNN_HTP_GRAPH_OPTIMIZATION_TYPE_SCHEDULE_THRESHOLD: QnnHtpGraph_OptimizationType_t = 1;
/// Finalize retries.
pub const QNN_HTP_GRAPH_OPTIMIZATION_TYPE_FINALIZE_RETRIES: QnnHtpGraph_OptimizationType_t = 2;
/// Finalize optimization level (`floatValue` 1.0 ..= 3.0 = O1 ..= O3; default O2).
pub const QNN_HTP_GRAPH_OPTIMIZATION_TYPE_FINALIZE_OPTIMIZATION_FLAG:
    QnnHtpGraph_OptimizationType_t = 3;
/// Unknown optimization type (the init value).
pub const QNN_HTP_GRAPH_OPTIMIZATION_TYPE_UNKNOWN: QnnHtpGraph_OptimizationType_t = 0x7fff_ffff;

/// `QnnHtpGraph_OptimizationOption_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct QnnHtpGraph_OptimizationOption_t {
    /// [`QnnHtpGraph_OptimizationType_t`].
    pub type_: QnnHtpGraph_OptimizationType_t,
    /// The value (e.g. 2.0 for O2).
    pub floatValue: f32,
}

/// Union of [`QnnHtpGraph_CustomConfig_t`] (48 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub union QnnHtpGraph_CustomConfigValue_t {
    /// OPTIMIZATION.
    pub optimizationOption: QnnHtpGraph_OptimizationOption_t,
    /// PRECISION.
    pub precision: Qnn_Precision_t,
    /// VTCM_SIZE_IN_MB.
    pub vtcmSizeInMB: u32,
    /// NUM_HVX_THREADS.
    pub numHvxThreads: u64,
    /// NUM_CORES.
    pub numCores: u32,
    /// VTCM_SIZE_IN_BYTES.
    pub vtcmSizeInBytes: u32,
    /// The other (larger) members, as raw words.
    pub raw: [u64; 6],
}

/// `QnnHtpGraph_CustomConfig_t` (56 B), behind [`QnnGraph_Config_t`] option CUSTOM.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct QnnHtpGraph_CustomConfig_t {
    /// [`QnnHtpGraph_ConfigOption_t`].
    pub option: QnnHtpGraph_ConfigOption_t,
    /// The value.
    pub u: QnnHtpGraph_CustomConfigValue_t,
}

/// `QnnHtpContext_ConfigOption_t`: weight sharing.
pub const QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_ENABLED: u32 = 1;
/// `QnnHtpContext_ConfigOption_t`: extended UDMA.
pub const QNN_HTP_CONTEXT_CONFIG_OPTION_USE_EXTENDED_UDMA: u32 = 11;

/// `groupRegistration` member of [`QnnHtpContext_CustomConfig_t`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct QnnHtpContext_GroupRegistration_t {
    /// First context of the group.
    pub firstGroupHandle: Qnn_ContextHandle_t,
    /// Maximum spill-fill buffer size.
    pub maxSpillFillBuffer: u64,
}

/// Union of [`QnnHtpContext_CustomConfig_t`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union QnnHtpContext_CustomConfigValue_t {
    /// A C `bool` member (weight sharing, extended UDMA, ...).
    pub boolValue: u8,
    /// A 64-bit member.
    pub u64Value: u64,
    /// Group registration.
    pub groupRegistration: QnnHtpContext_GroupRegistration_t,
}

/// `QnnHtpContext_CustomConfig_t` (24 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct QnnHtpContext_CustomConfig_t {
    /// Option.
    pub option: u32,
    /// The value.
    pub u: QnnHtpContext_CustomConfigValue_t,
}

/// `perfInfra` of [`QnnHtpDevice_Infrastructure_t`]: power/performance controls.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct QnnHtpDevice_PerfInfrastructure_t {
    /// `createPowerConfigId(deviceId, coreId, &powerConfigId)`.
    pub createPowerConfigId: Option<unsafe extern "C" fn(u32, u32, *mut u32) -> Qnn_ErrorHandle_t>,
    /// `destroyPowerConfigId(powerConfigId)`.
    pub destroyPowerConfigId: Option<unsafe extern "C" fn(u32) -> Qnn_ErrorHandle_t>,
    /// `setPowerConfig(powerConfigId, configs)`.
    pub setPowerConfig: Option<
        unsafe extern "C" fn(
            u32,
            *const *const QnnHtpPerfInfrastructure_PowerConfig_t,
        ) -> Qnn_ErrorHandle_t,
    >,
    /// `setMemoryConfig(deviceId, coreId, configs)`.
    pub setMemoryConfig: Option<
        unsafe extern "C" fn(
            u32,
            u32,
            *const *const QnnHtpPerfInfrastructure_MemoryConfig_t,
        ) -> Qnn_ErrorHandle_t,
    >,
}

/// `QnnHtpDevice_Infrastructure_t` (returned by `deviceGetInfrastructure` on HTP).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct QnnHtpDevice_Infrastructure_t {
    /// 0 = PERF.
    pub infraType: u32,
    /// Performance infrastructure.
    pub perfInfra: QnnHtpDevice_PerfInfrastructure_t,
}

// ---------------------------------------------------------------------------------------------
// The interface provider and its function table
// ---------------------------------------------------------------------------------------------

type E = Qnn_ErrorHandle_t;

/// An entry whose signature is not bound (it takes a struct of unverified layout by value).
pub type QnnUnboundFn = Option<unsafe extern "C" fn()>;

/// The core API 2.x function table (`QNN_INTERFACE_VER_TYPE`, 71 entries, 568 B, as in core
/// API 2.32; later 2.x libraries append entries, which are not bound).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct QnnInterface_FunctionTable_t {
    /// 0 `propertyHasCapability(key)`.
    pub propertyHasCapability: Option<unsafe extern "C" fn(QnnProperty_Key_t) -> E>,
    /// 1 `backendCreate(logger, configs, &backend)`.
    pub backendCreate: Option<
        unsafe extern "C" fn(
            Qnn_LogHandle_t,
            *const *const QnnBackend_Config_t,
            *mut Qnn_BackendHandle_t,
        ) -> E,
    >,
    /// 2 `backendSetConfig(backend, configs)`.
    pub backendSetConfig:
        Option<unsafe extern "C" fn(Qnn_BackendHandle_t, *const *const QnnBackend_Config_t) -> E>,
    /// 3 `backendGetApiVersion(&version)`.
    pub backendGetApiVersion: Option<unsafe extern "C" fn(*mut Qnn_ApiVersion_t) -> E>,
    /// 4 `backendGetBuildId(&id)` (static string).
    pub backendGetBuildId: Option<unsafe extern "C" fn(*mut *const c_char) -> E>,
    /// 5 `backendRegisterOpPackage(backend, path, provider, target)`.
    pub backendRegisterOpPackage: Option<
        unsafe extern "C" fn(Qnn_BackendHandle_t, *const c_char, *const c_char, *const c_char) -> E,
    >,
    /// 6 `backendGetSupportedOperations(backend, &n, &names)`.
    pub backendGetSupportedOperations: Option<
        unsafe extern "C" fn(
            Qnn_BackendHandle_t,
            *mut u32,
            *mut *const QnnBackend_OperationName_t,
        ) -> E,
    >,
    /// 7 `backendValidateOpConfig(backend, op)` (op by value).
    pub backendValidateOpConfig:
        Option<unsafe extern "C" fn(Qnn_BackendHandle_t, Qnn_OpConfig_t) -> E>,
    /// 8 `backendFree(backend)`.
    pub backendFree: Option<unsafe extern "C" fn(Qnn_BackendHandle_t) -> E>,
    /// 9 `contextCreate(backend, device, configs, &context)`.
    pub contextCreate: Option<
        unsafe extern "C" fn(
            Qnn_BackendHandle_t,
            Qnn_DeviceHandle_t,
            *const *const QnnContext_Config_t,
            *mut Qnn_ContextHandle_t,
        ) -> E,
    >,
    /// 10 `contextSetConfig(context, configs)`.
    pub contextSetConfig:
        Option<unsafe extern "C" fn(Qnn_ContextHandle_t, *const *const QnnContext_Config_t) -> E>,
    /// 11 `contextGetBinarySize(context, &size)`.
    pub contextGetBinarySize:
        Option<unsafe extern "C" fn(Qnn_ContextHandle_t, *mut Qnn_ContextBinarySize_t) -> E>,
    /// 12 `contextGetBinary(context, buffer, size, &written)`.
    pub contextGetBinary: Option<
        unsafe extern "C" fn(
            Qnn_ContextHandle_t,
            *mut c_void,
            Qnn_ContextBinarySize_t,
            *mut Qnn_ContextBinarySize_t,
        ) -> E,
    >,
    /// 13 `contextCreateFromBinary(backend, device, configs, buffer, size, &context, profile)`.
    pub contextCreateFromBinary: Option<
        unsafe extern "C" fn(
            Qnn_BackendHandle_t,
            Qnn_DeviceHandle_t,
            *const *const QnnContext_Config_t,
            *const c_void,
            Qnn_ContextBinarySize_t,
            *mut Qnn_ContextHandle_t,
            Qnn_ProfileHandle_t,
        ) -> E,
    >,
    /// 14 `contextFree(context, profile)` (frees its graphs).
    pub contextFree: Option<unsafe extern "C" fn(Qnn_ContextHandle_t, Qnn_ProfileHandle_t) -> E>,
    /// 15 `graphCreate(context, name, configs, &graph)`.
    pub graphCreate: Option<
        unsafe extern "C" fn(
            Qnn_ContextHandle_t,
            *const c_char,
            *const *const QnnGraph_Config_t,
            *mut Qnn_GraphHandle_t,
        ) -> E,
    >,
    /// 16 `graphCreateSubgraph(graph, name, &subgraph)`.
    pub graphCreateSubgraph:
        Option<unsafe extern "C" fn(Qnn_GraphHandle_t, *const c_char, *mut Qnn_GraphHandle_t) -> E>,
    /// 17 `graphSetConfig(graph, configs)`.
    pub graphSetConfig:
        Option<unsafe extern "C" fn(Qnn_GraphHandle_t, *const *const QnnGraph_Config_t) -> E>,
    /// 18 `graphAddNode(graph, op)` (op by value).
    pub graphAddNode: Option<unsafe extern "C" fn(Qnn_GraphHandle_t, Qnn_OpConfig_t) -> E>,
    /// 19 `graphFinalize(graph, profile, signal)`.
    pub graphFinalize: Option<
        unsafe extern "C" fn(Qnn_GraphHandle_t, Qnn_ProfileHandle_t, Qnn_SignalHandle_t) -> E,
    >,
    /// 20 `graphRetrieve(context, name, &graph)`.
    pub graphRetrieve: Option<
        unsafe extern "C" fn(Qnn_ContextHandle_t, *const c_char, *mut Qnn_GraphHandle_t) -> E,
    >,
    /// 21 `graphExecute(graph, inputs, nIn, outputs, nOut, profile, signal)`.
    pub graphExecute: Option<
        unsafe extern "C" fn(
            Qnn_GraphHandle_t,
            *const Qnn_Tensor_t,
            u32,
            *mut Qnn_Tensor_t,
            u32,
            Qnn_ProfileHandle_t,
            Qnn_SignalHandle_t,
        ) -> E,
    >,
    /// 22 `graphExecuteAsync(graph, inputs, nIn, outputs, nOut, profile, signal, notify, param)`.
    pub graphExecuteAsync: Option<
        unsafe extern "C" fn(
            Qnn_GraphHandle_t,
            *const Qnn_Tensor_t,
            u32,
            *mut Qnn_Tensor_t,
            u32,
            Qnn_ProfileHandle_t,
            Qnn_SignalHandle_t,
            Qnn_NotifyFn_t,
            *mut c_void,
        ) -> E,
    >,
    /// 23 `tensorCreateContextTensor(context, &tensor)` (id written back).
    pub tensorCreateContextTensor:
        Option<unsafe extern "C" fn(Qnn_ContextHandle_t, *mut Qnn_Tensor_t) -> E>,
    /// 24 `tensorCreateGraphTensor(graph, &tensor)` (id written back; STATIC data copied).
    pub tensorCreateGraphTensor:
        Option<unsafe extern "C" fn(Qnn_GraphHandle_t, *mut Qnn_Tensor_t) -> E>,
    /// 25 `logCreate(callback, maxLevel, &logger)`.
    pub logCreate:
        Option<unsafe extern "C" fn(QnnLog_Callback_t, QnnLog_Level_t, *mut Qnn_LogHandle_t) -> E>,
    /// 26 `logSetLogLevel(logger, maxLevel)`.
    pub logSetLogLevel: Option<unsafe extern "C" fn(Qnn_LogHandle_t, QnnLog_Level_t) -> E>,
    /// 27 `logFree(logger)`.
    pub logFree: Option<unsafe extern "C" fn(Qnn_LogHandle_t) -> E>,
    /// 28 `profileCreate(backend, level, &profile)`.
    pub profileCreate: Option<
        unsafe extern "C" fn(
            Qnn_BackendHandle_t,
            QnnProfile_Level_t,
            *mut Qnn_ProfileHandle_t,
        ) -> E,
    >,
    /// 29 `profileSetConfig(profile, configs)`.
    pub profileSetConfig:
        Option<unsafe extern "C" fn(Qnn_ProfileHandle_t, *const *const QnnProfile_Config_t) -> E>,
    /// 30 `profileGetEvents(profile, &ids, &n)`.
    pub profileGetEvents: Option<
        unsafe extern "C" fn(Qnn_ProfileHandle_t, *mut *const QnnProfile_EventId_t, *mut u32) -> E,
    >,
    /// 31 `profileGetSubEvents(event, &ids, &n)`.
    pub profileGetSubEvents: Option<
        unsafe extern "C" fn(QnnProfile_EventId_t, *mut *const QnnProfile_EventId_t, *mut u32) -> E,
    >,
    /// 32 `profileGetEventData(event, &data)`.
    pub profileGetEventData:
        Option<unsafe extern "C" fn(QnnProfile_EventId_t, *mut QnnProfile_EventData_t) -> E>,
    /// 33 `profileGetExtendedEventData(event, &data)`.
    pub profileGetExtendedEventData: Option<
        unsafe extern "C" fn(QnnProfile_EventId_t, *mut QnnProfile_ExtendedEventData_t) -> E,
    >,
    /// 34 `profileFree(profile)`.
    pub profileFree: Option<unsafe extern "C" fn(Qnn_ProfileHandle_t) -> E>,
    /// 35 `memRegister(context, descriptors, n, handles)` (1000 on the simulator).
    pub memRegister: Option<
        unsafe extern "C" fn(
            Qnn_ContextHandle_t,
            *const Qnn_MemDescriptor_t,
            u32,
            *mut Qnn_MemHandle_t,
        ) -> E,
    >,
    /// 36 `memDeRegister(handles, n)`.
    pub memDeRegister: Option<unsafe extern "C" fn(*const Qnn_MemHandle_t, u32) -> E>,
    /// 37 `deviceGetPlatformInfo(logger, &info)`.
    pub deviceGetPlatformInfo:
        Option<unsafe extern "C" fn(Qnn_LogHandle_t, *mut *const QnnDevice_PlatformInfo_t) -> E>,
    /// 38 `deviceFreePlatformInfo(logger, info)`.
    pub deviceFreePlatformInfo:
        Option<unsafe extern "C" fn(Qnn_LogHandle_t, *const QnnDevice_PlatformInfo_t) -> E>,
    /// 39 `deviceGetInfrastructure(&infra)` (HTP: a [`QnnHtpDevice_Infrastructure_t`] pointer).
    pub deviceGetInfrastructure: Option<unsafe extern "C" fn(*mut *mut c_void) -> E>,
    /// 40 `deviceCreate(logger, configs, &device)`.
    pub deviceCreate: Option<
        unsafe extern "C" fn(
            Qnn_LogHandle_t,
            *const *const QnnDevice_Config_t,
            *mut Qnn_DeviceHandle_t,
        ) -> E,
    >,
    /// 41 `deviceSetConfig(device, configs)`.
    pub deviceSetConfig:
        Option<unsafe extern "C" fn(Qnn_DeviceHandle_t, *const *const QnnDevice_Config_t) -> E>,
    /// 42 `deviceGetInfo(device, &info)`.
    pub deviceGetInfo:
        Option<unsafe extern "C" fn(Qnn_DeviceHandle_t, *mut *const QnnDevice_PlatformInfo_t) -> E>,
    /// 43 `deviceFree(device)`.
    pub deviceFree: Option<unsafe extern "C" fn(Qnn_DeviceHandle_t) -> E>,
    /// 44 `signalCreate(backend, configs, &signal)`.
    pub signalCreate: Option<
        unsafe extern "C" fn(
            Qnn_BackendHandle_t,
            *const *const QnnSignal_Config_t,
            *mut Qnn_SignalHandle_t,
        ) -> E,
    >,
    /// 45 `signalSetConfig(signal, configs)`.
    pub signalSetConfig:
        Option<unsafe extern "C" fn(Qnn_SignalHandle_t, *const *const QnnSignal_Config_t) -> E>,
    /// 46 `signalTrigger(signal)`.
    pub signalTrigger: Option<unsafe extern "C" fn(Qnn_SignalHandle_t) -> E>,
    /// 47 `signalFree(signal)`.
    pub signalFree: Option<unsafe extern "C" fn(Qnn_SignalHandle_t) -> E>,
    /// 48 `errorGetMessage(error, &message)` (static string).
    pub errorGetMessage: Option<unsafe extern "C" fn(Qnn_ErrorHandle_t, *mut *const c_char) -> E>,
    /// 49 `errorGetVerboseMessage(error, &message)` (1000 on the simulator).
    pub errorGetVerboseMessage:
        Option<unsafe extern "C" fn(Qnn_ErrorHandle_t, *mut *const c_char) -> E>,
    /// 50 `errorFreeVerboseMessage(message)`.
    pub errorFreeVerboseMessage: Option<unsafe extern "C" fn(*const c_char) -> E>,
    /// 51 `graphPrepareExecutionEnvironment(graph, envs, n)`.
    pub graphPrepareExecutionEnvironment: Option<
        unsafe extern "C" fn(Qnn_GraphHandle_t, *mut *mut QnnGraph_ExecuteEnvironment_t, u32) -> E,
    >,
    /// 52 `graphReleaseExecutionEnvironment(graph, envs, n)`.
    pub graphReleaseExecutionEnvironment: Option<
        unsafe extern "C" fn(
            Qnn_GraphHandle_t,
            *const *const QnnGraph_ExecuteEnvironment_t,
            u32,
        ) -> E,
    >,
    /// 53 `graphGetProperty(graph, properties)`.
    pub graphGetProperty:
        Option<unsafe extern "C" fn(Qnn_GraphHandle_t, *mut *mut QnnGraph_Property_t) -> E>,
    /// 54 `contextValidateBinary(backend, device, configs, buffer, size)`.
    pub contextValidateBinary: Option<
        unsafe extern "C" fn(
            Qnn_BackendHandle_t,
            Qnn_DeviceHandle_t,
            *const *const QnnContext_Config_t,
            *const c_void,
            Qnn_ContextBinarySize_t,
        ) -> E,
    >,
    /// 55 `contextCreateFromBinaryWithSignal(backend, device, configs, buffer, size, &ctx, profile, signal)`.
    pub contextCreateFromBinaryWithSignal: Option<
        unsafe extern "C" fn(
            Qnn_BackendHandle_t,
            Qnn_DeviceHandle_t,
            *const *const QnnContext_Config_t,
            *const c_void,
            Qnn_ContextBinarySize_t,
            *mut Qnn_ContextHandle_t,
            Qnn_ProfileHandle_t,
            Qnn_SignalHandle_t,
        ) -> E,
    >,
    /// 56 `contextCreateFromBinaryListAsync(backend, device, params, listConfigs, signal)`.
    pub contextCreateFromBinaryListAsync: Option<
        unsafe extern "C" fn(
            Qnn_BackendHandle_t,
            Qnn_DeviceHandle_t,
            *const *const QnnContext_Params_t,
            *const *const QnnContext_Config_t,
            Qnn_SignalHandle_t,
        ) -> E,
    >,
    /// 57 `tensorUpdateGraphTensors(graph, tensors, n)`.
    pub tensorUpdateGraphTensors:
        Option<unsafe extern "C" fn(Qnn_GraphHandle_t, *const *const Qnn_Tensor_t, u64) -> E>,
    /// 58 `tensorUpdateContextTensors(context, tensors, n)`.
    pub tensorUpdateContextTensors:
        Option<unsafe extern "C" fn(Qnn_ContextHandle_t, *const *const Qnn_Tensor_t, u64) -> E>,
    /// 59 `contextGetBinarySectionSize(context, graph, section, &size)`.
    pub contextGetBinarySectionSize: Option<
        unsafe extern "C" fn(
            Qnn_ContextHandle_t,
            Qnn_GraphHandle_t,
            u32,
            *mut Qnn_ContextBinarySize_t,
        ) -> E,
    >,
    /// 60 `contextGetBinarySection(context, graph, section, buffer, &written, profile, signal)`.
    pub contextGetBinarySection: Option<
        unsafe extern "C" fn(
            Qnn_ContextHandle_t,
            Qnn_GraphHandle_t,
            u32,
            *const QnnContext_Buffer_t,
            *mut Qnn_ContextBinarySize_t,
            Qnn_ProfileHandle_t,
            Qnn_SignalHandle_t,
        ) -> E,
    >,
    /// 61 `contextApplyBinarySection(context, graph, section, buffer, profile, signal)`.
    pub contextApplyBinarySection: Option<
        unsafe extern "C" fn(
            Qnn_ContextHandle_t,
            Qnn_GraphHandle_t,
            u32,
            *const QnnContext_Buffer_t,
            Qnn_ProfileHandle_t,
            Qnn_SignalHandle_t,
        ) -> E,
    >,
    /// 62 `backendGetProperty(backend, properties)`.
    pub backendGetProperty:
        Option<unsafe extern "C" fn(Qnn_BackendHandle_t, *mut *mut QnnBackend_Property_t) -> E>,
    /// 63 `contextGetProperty(context, properties)`.
    pub contextGetProperty:
        Option<unsafe extern "C" fn(Qnn_ContextHandle_t, *mut *mut QnnContext_Property_t) -> E>,
    /// 64 `contextGetIncrementalBinary(context, &buffer, &start, &written)`.
    pub contextGetIncrementalBinary: Option<
        unsafe extern "C" fn(
            Qnn_ContextHandle_t,
            *mut *const c_void,
            *mut u64,
            *mut Qnn_ContextBinarySize_t,
        ) -> E,
    >,
    /// 65 `contextReleaseIncrementalBinary(context, buffer, start)`.
    pub contextReleaseIncrementalBinary:
        Option<unsafe extern "C" fn(Qnn_ContextHandle_t, *const c_void, u64) -> E>,
    /// 66 `contextFinalize(context, profile)`.
    pub contextFinalize:
        Option<unsafe extern "C" fn(Qnn_ContextHandle_t, Qnn_ProfileHandle_t) -> E>,
    /// 67 `globalConfigSet(configs)`.
    pub globalConfigSet: Option<unsafe extern "C" fn(*const *const QnnGlobalConfig_t) -> E>,
    /// 68 `contextCreateFromBinaryWithCallback(backend, device, configs, callback, buffer, size,
    /// &ctx, profile, signal)`.
    pub contextCreateFromBinaryWithCallback: Option<
        unsafe extern "C" fn(
            Qnn_BackendHandle_t,
            Qnn_DeviceHandle_t,
            *const *const QnnContext_Config_t,
            *const Qnn_ContextBinaryCallback_t,
            *const c_void,
            Qnn_ContextBinarySize_t,
            *mut Qnn_ContextHandle_t,
            Qnn_ProfileHandle_t,
            Qnn_SignalHandle_t,
        ) -> E,
    >,
    /// 69 `contextGetBinarySectionUpdate(buffer, aux, tensors, n, keepUpdatable, logger, profile,
    /// signal, &update)`.
    pub contextGetBinarySectionUpdate: Option<
        unsafe extern "C" fn(
            *const QnnContext_Buffer_t,
            *const QnnContext_Buffer_t,
            *const *const Qnn_Tensor_t,
            u64,
            u8,
            Qnn_LogHandle_t,
            Qnn_ProfileHandle_t,
            Qnn_SignalHandle_t,
            *mut QnnContext_Buffer_t,
        ) -> E,
    >,
    /// 70 `contextFreeBinarySectionUpdate(update, logger)`: takes a `QnnContext_Buffer_t` by
    /// value, whose layout is not bound, so the signature is left unbound.
    pub contextFreeBinarySectionUpdate: QnnUnboundFn,
}

/// `QnnInterface_t`: one provider returned by `QnnInterface_getProviders`. Never construct or
/// copy it: keep the pointer the library returned (newer libraries append table entries).
#[repr(C)]
pub struct QnnInterface_t {
    /// Backend id ([`QNN_BACKEND_ID_HTP`] = 6).
    pub backendId: u32,
    /// Provider name (may be NULL), e.g. `"HTP_QTI_AISW"`.
    pub providerName: *const c_char,
    /// API versions this provider implements.
    pub apiVersion: Qnn_ApiVersion_t,
    /// The function table (the C union's only member for core API 2.x).
    pub v2: QnnInterface_FunctionTable_t,
}

/// `QnnInterface_getProviders(&providerList, &numProviders)`: the backend entry point.
pub type QnnInterfaceGetProvidersFn_t = unsafe extern "C" fn(
    providerList: *mut *const *const QnnInterface_t,
    numProviders: *mut u32,
) -> E;

/// Name of the backend entry point.
pub const QNN_INTERFACE_GET_PROVIDERS: &core::ffi::CStr = c"QnnInterface_getProviders";

// ---------------------------------------------------------------------------------------------
// QnnSystem interface
// ---------------------------------------------------------------------------------------------

/// Opaque `QnnSystemContext_Handle_t`.
pub type QnnSystemContext_Handle_t = *mut c_void;

/// The `QnnSystem` function table (16 entries in system API 1.x). Only the system-context
/// entries have bound signatures; the others are declared in order but unbound.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct QnnSystemInterface_FunctionTable_t {
    /// 0 `systemContextCreate(&handle)`.
    pub systemContextCreate: Option<unsafe extern "C" fn(*mut QnnSystemContext_Handle_t) -> E>,
    /// 1 `systemContextGetBinaryInfo(handle, buffer, size, &info, &infoSize)`.
    pub systemContextGetBinaryInfo: Option<
        unsafe extern "C" fn(
            QnnSystemContext_Handle_t,
            *mut c_void,
            u64,
            *mut *const QnnSystemContext_BinaryInfo_t,
            *mut Qnn_ContextBinarySize_t,
        ) -> E,
    >,
    /// 2 `systemContextGetMetaData` (unbound).
    pub systemContextGetMetaData: QnnUnboundFn,
    /// 3 `systemContextFree(handle)`.
    pub systemContextFree: Option<unsafe extern "C" fn(QnnSystemContext_Handle_t) -> E>,
    /// 4 `systemTensorGetMemoryFootprint` (unbound).
    pub systemTensorGetMemoryFootprint: QnnUnboundFn,
    /// 5 `systemLogCreate` (unbound).
    pub systemLogCreate: QnnUnboundFn,
    /// 6 `systemLogSetLogLevel` (unbound).
    pub systemLogSetLogLevel: QnnUnboundFn,
    /// 7 `systemLogFree` (unbound).
    pub systemLogFree: QnnUnboundFn,
    /// 8 `systemDlcCreateFromFile` (unbound).
    pub systemDlcCreateFromFile: QnnUnboundFn,
    /// 9 `systemDlcCreateFromBinary` (unbound).
    pub systemDlcCreateFromBinary: QnnUnboundFn,
    /// 10 `systemDlcComposeGraphs` (unbound).
    pub systemDlcComposeGraphs: QnnUnboundFn,
    /// 11 `systemDlcGetOpMappings` (unbound).
    pub systemDlcGetOpMappings: QnnUnboundFn,
    /// 12 `systemDlcFree` (unbound).
    pub systemDlcFree: QnnUnboundFn,
    /// 13 `systemProfileCreateSerializationTarget` (unbound).
    pub systemProfileCreateSerializationTarget: QnnUnboundFn,
    /// 14 `systemProfileSerializeEventData` (unbound).
    pub systemProfileSerializeEventData: QnnUnboundFn,
    /// 15 `systemProfileFreeSerializationTarget` (unbound).
    pub systemProfileFreeSerializationTarget: QnnUnboundFn,
}

/// `QnnSystemInterface_t`: one provider returned by `QnnSystemInterface_getProviders`.
#[repr(C)]
pub struct QnnSystemInterface_t {
    /// Backend id (0 for the system library).
    pub backendId: u32,
    /// Provider name (may be NULL), e.g. `"SYSTEM_QTI_AISW"`.
    pub providerName: *const c_char,
    /// System API version (1.15 on the simulator's release).
    pub systemApiVersion: Qnn_Version_t,
    /// The function table.
    pub v1: QnnSystemInterface_FunctionTable_t,
}

/// `QnnSystemInterface_getProviders(&providerList, &numProviders)`.
pub type QnnSystemInterfaceGetProvidersFn_t = unsafe extern "C" fn(
    providerList: *mut *const *const QnnSystemInterface_t,
    numProviders: *mut u32,
) -> E;

/// Name of the system library entry point.
pub const QNN_SYSTEM_INTERFACE_GET_PROVIDERS: &core::ffi::CStr = c"QnnSystemInterface_getProviders";

// ---------------------------------------------------------------------------------------------
// Layout assertions (LP64). The numbers are the verified fact-sheet values.
// ---------------------------------------------------------------------------------------------

#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(size_of::<Qnn_Version_t>() == 12 && align_of::<Qnn_Version_t>() == 4);
    assert!(size_of::<Qnn_ApiVersion_t>() == 24);
    assert!(offset_of!(Qnn_ApiVersion_t, backendApiVersion) == 12);

    assert!(size_of::<Qnn_ScalarValue_t>() == 8);
    assert!(size_of::<Qnn_Scalar_t>() == 16 && align_of::<Qnn_Scalar_t>() == 8);
    assert!(offset_of!(Qnn_Scalar_t, value) == 8);

    assert!(size_of::<Qnn_ScaleOffset_t>() == 8 && offset_of!(Qnn_ScaleOffset_t, offset) == 4);
    assert!(size_of::<Qnn_AxisScaleOffset_t>() == 16);
    assert!(offset_of!(Qnn_AxisScaleOffset_t, numScaleOffsets) == 4);
    assert!(offset_of!(Qnn_AxisScaleOffset_t, scaleOffset) == 8);
    assert!(size_of::<Qnn_BwScaleOffset_t>() == 12);
    assert!(
        offset_of!(Qnn_BwScaleOffset_t, scale) == 4 && offset_of!(Qnn_BwScaleOffset_t, offset) == 8
    );
    assert!(size_of::<Qnn_BwAxisScaleOffset_t>() == 32);
    assert!(offset_of!(Qnn_BwAxisScaleOffset_t, axis) == 4);
    assert!(offset_of!(Qnn_BwAxisScaleOffset_t, numElements) == 8);
    assert!(offset_of!(Qnn_BwAxisScaleOffset_t, scales) == 16);
    assert!(offset_of!(Qnn_BwAxisScaleOffset_t, offsets) == 24);
    assert!(
        size_of::<Qnn_BlockEncoding_t>() == 16 && offset_of!(Qnn_BlockEncoding_t, scaleOffset) == 8
    );
    assert!(size_of::<Qnn_FloatBlockEncoding_t>() == 16);
    assert!(offset_of!(Qnn_FloatBlockEncoding_t, floatScaleOffset) == 8);
    assert!(size_of::<Qnn_BwFloatBlockEncoding_t>() == 24);
    assert!(offset_of!(Qnn_BwFloatBlockEncoding_t, blockSize) == 8);
    assert!(offset_of!(Qnn_BwFloatBlockEncoding_t, floatScaleOffset) == 16);
    assert!(size_of::<Qnn_QuantizeParamsEncoding_t>() == 32);
    assert!(size_of::<Qnn_QuantizeParams_t>() == 40 && align_of::<Qnn_QuantizeParams_t>() == 8);
    assert!(offset_of!(Qnn_QuantizeParams_t, quantizationEncoding) == 4);
    assert!(offset_of!(Qnn_QuantizeParams_t, encoding) == 8);

    assert!(size_of::<Qnn_ClientBuffer_t>() == 16 && offset_of!(Qnn_ClientBuffer_t, dataSize) == 8);
    assert!(size_of::<Qnn_TensorMem_t>() == 16);

    assert!(offset_of!(Qnn_TensorV1_t, id) == 0);
    assert!(offset_of!(Qnn_TensorV1_t, name) == 8);
    assert!(offset_of!(Qnn_TensorV1_t, type_) == 16);
    assert!(offset_of!(Qnn_TensorV1_t, dataFormat) == 20);
    assert!(offset_of!(Qnn_TensorV1_t, dataType) == 24);
    assert!(offset_of!(Qnn_TensorV1_t, quantizeParams) == 32);
    assert!(offset_of!(Qnn_TensorV1_t, rank) == 72);
    assert!(offset_of!(Qnn_TensorV1_t, dimensions) == 80);
    assert!(offset_of!(Qnn_TensorV1_t, memType) == 88);
    assert!(offset_of!(Qnn_TensorV1_t, mem) == 96);
    assert!(size_of::<Qnn_TensorV1_t>() == 112);

    assert!(size_of::<Qnn_SparseLayoutHybridCoo_t>() == 8);
    assert!(
        size_of::<Qnn_SparseParams_t>() == 12 && offset_of!(Qnn_SparseParams_t, hybridCoo) == 4
    );
    assert!(offset_of!(Qnn_TensorV2_t, id) == 0);
    assert!(offset_of!(Qnn_TensorV2_t, name) == 8);
    assert!(offset_of!(Qnn_TensorV2_t, type_) == 16);
    assert!(offset_of!(Qnn_TensorV2_t, dataFormat) == 20);
    assert!(offset_of!(Qnn_TensorV2_t, dataType) == 24);
    assert!(offset_of!(Qnn_TensorV2_t, quantizeParams) == 32);
    assert!(offset_of!(Qnn_TensorV2_t, rank) == 72);
    assert!(offset_of!(Qnn_TensorV2_t, dimensions) == 80);
    assert!(offset_of!(Qnn_TensorV2_t, memType) == 88);
    assert!(offset_of!(Qnn_TensorV2_t, mem) == 96);
    assert!(offset_of!(Qnn_TensorV2_t, isDynamicDimensions) == 112);
    assert!(offset_of!(Qnn_TensorV2_t, sparseParams) == 120);
    assert!(offset_of!(Qnn_TensorV2_t, isProduced) == 132);
    assert!(size_of::<Qnn_TensorV2_t>() == 136);

    assert!(size_of::<Qnn_TensorUnion_t>() == 136);
    assert!(offset_of!(Qnn_Tensor_t, u) == 8);
    assert!(size_of::<Qnn_Tensor_t>() == 144 && align_of::<Qnn_Tensor_t>() == 8);

    assert!(size_of::<Qnn_ParamValue_t>() == 144);
    assert!(offset_of!(Qnn_Param_t, name) == 8 && offset_of!(Qnn_Param_t, u) == 16);
    assert!(size_of::<Qnn_Param_t>() == 160);

    assert!(offset_of!(Qnn_OpConfigV1_t, packageName) == 8);
    assert!(offset_of!(Qnn_OpConfigV1_t, typeName) == 16);
    assert!(offset_of!(Qnn_OpConfigV1_t, numOfParams) == 24);
    assert!(offset_of!(Qnn_OpConfigV1_t, params) == 32);
    assert!(offset_of!(Qnn_OpConfigV1_t, numOfInputs) == 40);
    assert!(offset_of!(Qnn_OpConfigV1_t, inputTensors) == 48);
    assert!(offset_of!(Qnn_OpConfigV1_t, numOfOutputs) == 56);
    assert!(offset_of!(Qnn_OpConfigV1_t, outputTensors) == 64);
    assert!(size_of::<Qnn_OpConfigV1_t>() == 72);
    assert!(offset_of!(Qnn_OpConfig_t, v1) == 8 && size_of::<Qnn_OpConfig_t>() == 80);
    assert!(size_of::<Qnn_NotifyStatus_t>() == 8);

    assert!(size_of::<Qnn_ErrorReportingConfig_t>() == 8);
    assert!(size_of::<QnnBackend_Config_t>() == 16 && offset_of!(QnnBackend_Config_t, u) == 8);
    assert!(size_of::<QnnDevice_Config_t>() == 16 && offset_of!(QnnDevice_Config_t, u) == 8);
    assert!(size_of::<QnnContext_Config_t>() == 16 && offset_of!(QnnContext_Config_t, u) == 8);
    assert!(size_of::<QnnGraph_Config_t>() == 16 && offset_of!(QnnGraph_Config_t, u) == 8);

    assert!(size_of::<Qnn_MemShape_t>() == 24);
    assert!(
        offset_of!(Qnn_MemShape_t, dimSize) == 8 && offset_of!(Qnn_MemShape_t, shapeConfig) == 16
    );
    assert!(size_of::<Qnn_MemDmaBufInfo_t>() == 16 && offset_of!(Qnn_MemDmaBufInfo_t, data) == 8);
    assert!(offset_of!(Qnn_MemDescriptor_t, dataType) == 24);
    assert!(offset_of!(Qnn_MemDescriptor_t, memType) == 28);
    assert!(offset_of!(Qnn_MemDescriptor_t, u) == 32);
    assert!(size_of::<Qnn_MemDescriptor_t>() == 48);

    assert!(offset_of!(QnnDevice_HardwareDeviceInfo_t, v1) == 8);
    assert!(offset_of!(QnnDevice_HardwareDeviceInfoV1_t, deviceType) == 4);
    assert!(offset_of!(QnnDevice_HardwareDeviceInfoV1_t, numCores) == 8);
    assert!(offset_of!(QnnDevice_HardwareDeviceInfoV1_t, cores) == 16);
    assert!(offset_of!(QnnDevice_HardwareDeviceInfoV1_t, deviceInfoExtension) == 24);
    assert!(size_of::<QnnDevice_HardwareDeviceInfo_t>() == 40);
    assert!(offset_of!(QnnDevice_PlatformInfo_t, v1) == 8);
    assert!(offset_of!(QnnDevice_PlatformInfoV1_t, hwDevices) == 8);
    assert!(size_of::<QnnDevice_PlatformInfo_t>() == 24);
    assert!(offset_of!(QnnHtpDevice_DeviceInfoExtension_t, onChipDevice) == 8);
    assert!(offset_of!(QnnHtpDevice_OnChipDeviceInfoExtension_t, socModel) == 8);
    assert!(offset_of!(QnnHtpDevice_OnChipDeviceInfoExtension_t, signedPdSupport) == 12);
    assert!(offset_of!(QnnHtpDevice_OnChipDeviceInfoExtension_t, dlbcSupport) == 13);
    assert!(offset_of!(QnnHtpDevice_OnChipDeviceInfoExtension_t, arch) == 16);
    assert!(size_of::<QnnHtpDevice_DeviceInfoExtension_t>() == 32);

    assert!(
        size_of::<QnnHtpDevice_DeviceArch_t>() == 8
            && offset_of!(QnnHtpDevice_DeviceArch_t, arch) == 4
    );
    assert!(size_of::<QnnHtpDevice_DeviceFlag_t>() == 8);
    assert!(size_of::<QnnHtpDevice_CustomConfigLegacyValue_t>() == 8);
    assert!(size_of::<QnnHtpDevice_CustomConfigLegacy_t>() == 12);
    assert!(align_of::<QnnHtpDevice_CustomConfigLegacy_t>() == 4);
    assert!(offset_of!(QnnHtpDevice_CustomConfigLegacy_t, u) == 4);
    assert!(size_of::<QnnHtpDevice_CustomConfigValue_t>() == 8);
    assert!(
        size_of::<QnnHtpDevice_CustomConfig_t>() == 16
            && align_of::<QnnHtpDevice_CustomConfig_t>() == 8
    );
    assert!(offset_of!(QnnHtpDevice_CustomConfig_t, u) == 8);

    assert!(size_of::<QnnHtpGraph_OptimizationOption_t>() == 8);
    assert!(offset_of!(QnnHtpGraph_OptimizationOption_t, floatValue) == 4);
    assert!(size_of::<QnnHtpGraph_CustomConfigValue_t>() == 48);
    assert!(
        size_of::<QnnHtpGraph_CustomConfig_t>() == 56
            && offset_of!(QnnHtpGraph_CustomConfig_t, u) == 8
    );
    assert!(size_of::<QnnHtpContext_GroupRegistration_t>() == 16);
    assert!(
        size_of::<QnnHtpContext_CustomConfig_t>() == 24
            && offset_of!(QnnHtpContext_CustomConfig_t, u) == 8
    );
    assert!(size_of::<QnnHtpDevice_PerfInfrastructure_t>() == 32);
    assert!(offset_of!(QnnHtpDevice_Infrastructure_t, perfInfra) == 8);
    assert!(size_of::<QnnHtpDevice_Infrastructure_t>() == 40);

    // The function table: every slot is one pointer (Option<fn> is pointer-sized, NULL = None).
    type T = QnnInterface_FunctionTable_t;
    assert!(size_of::<T>() == 71 * 8);
    assert!(offset_of!(T, propertyHasCapability) == 0);
    assert!(offset_of!(T, backendCreate) == 8);
    assert!(offset_of!(T, backendSetConfig) == 16);
    assert!(offset_of!(T, backendGetApiVersion) == 24);
    assert!(offset_of!(T, backendGetBuildId) == 32);
    assert!(offset_of!(T, backendRegisterOpPackage) == 40);
    assert!(offset_of!(T, backendGetSupportedOperations) == 48);
    assert!(offset_of!(T, backendValidateOpConfig) == 56);
    assert!(offset_of!(T, backendFree) == 64);
    assert!(offset_of!(T, contextCreate) == 72);
    assert!(offset_of!(T, contextSetConfig) == 80);
    assert!(offset_of!(T, contextGetBinarySize) == 88);
    assert!(offset_of!(T, contextGetBinary) == 96);
    assert!(offset_of!(T, contextCreateFromBinary) == 104);
    assert!(offset_of!(T, contextFree) == 112);
    assert!(offset_of!(T, graphCreate) == 120);
    assert!(offset_of!(T, graphCreateSubgraph) == 128);
    assert!(offset_of!(T, graphSetConfig) == 136);
    assert!(offset_of!(T, graphAddNode) == 144);
    assert!(offset_of!(T, graphFinalize) == 152);
    assert!(offset_of!(T, graphRetrieve) == 160);
    assert!(offset_of!(T, graphExecute) == 168);
    assert!(offset_of!(T, graphExecuteAsync) == 176);
    assert!(offset_of!(T, tensorCreateContextTensor) == 184);
    assert!(offset_of!(T, tensorCreateGraphTensor) == 192);
    assert!(offset_of!(T, logCreate) == 200);
    assert!(offset_of!(T, logSetLogLevel) == 208);
    assert!(offset_of!(T, logFree) == 216);
    assert!(offset_of!(T, profileCreate) == 224);
    assert!(offset_of!(T, profileSetConfig) == 232);
    assert!(offset_of!(T, profileGetEvents) == 240);
    assert!(offset_of!(T, profileGetSubEvents) == 248);
    assert!(offset_of!(T, profileGetEventData) == 256);
    assert!(offset_of!(T, profileGetExtendedEventData) == 264);
    assert!(offset_of!(T, profileFree) == 272);
    assert!(offset_of!(T, memRegister) == 280);
    assert!(offset_of!(T, memDeRegister) == 288);
    assert!(offset_of!(T, deviceGetPlatformInfo) == 296);
    assert!(offset_of!(T, deviceFreePlatformInfo) == 304);
    assert!(offset_of!(T, deviceGetInfrastructure) == 312);
    assert!(offset_of!(T, deviceCreate) == 320);
    assert!(offset_of!(T, deviceSetConfig) == 328);
    assert!(offset_of!(T, deviceGetInfo) == 336);
    assert!(offset_of!(T, deviceFree) == 344);
    assert!(offset_of!(T, signalCreate) == 352);
    assert!(offset_of!(T, signalSetConfig) == 360);
    assert!(offset_of!(T, signalTrigger) == 368);
    assert!(offset_of!(T, signalFree) == 376);
    assert!(offset_of!(T, errorGetMessage) == 384);
    assert!(offset_of!(T, errorGetVerboseMessage) == 392);
    assert!(offset_of!(T, errorFreeVerboseMessage) == 400);
    assert!(offset_of!(T, graphPrepareExecutionEnvironment) == 408);
    assert!(offset_of!(T, graphReleaseExecutionEnvironment) == 416);
    assert!(offset_of!(T, graphGetProperty) == 424);
    assert!(offset_of!(T, contextValidateBinary) == 432);
    assert!(offset_of!(T, contextCreateFromBinaryWithSignal) == 440);
    assert!(offset_of!(T, contextCreateFromBinaryListAsync) == 448);
    assert!(offset_of!(T, tensorUpdateGraphTensors) == 456);
    assert!(offset_of!(T, tensorUpdateContextTensors) == 464);
    assert!(offset_of!(T, contextGetBinarySectionSize) == 472);
    assert!(offset_of!(T, contextGetBinarySection) == 480);
    assert!(offset_of!(T, contextApplyBinarySection) == 488);
    assert!(offset_of!(T, backendGetProperty) == 496);
    assert!(offset_of!(T, contextGetProperty) == 504);
    assert!(offset_of!(T, contextGetIncrementalBinary) == 512);
    assert!(offset_of!(T, contextReleaseIncrementalBinary) == 520);
    assert!(offset_of!(T, contextFinalize) == 528);
    assert!(offset_of!(T, globalConfigSet) == 536);
    assert!(offset_of!(T, contextCreateFromBinaryWithCallback) == 544);
    assert!(offset_of!(T, contextGetBinarySectionUpdate) == 552);
    assert!(offset_of!(T, contextFreeBinarySectionUpdate) == 560);

    assert!(offset_of!(QnnInterface_t, providerName) == 8);
    assert!(offset_of!(QnnInterface_t, apiVersion) == 16);
    assert!(offset_of!(QnnInterface_t, v2) == 40);
    assert!(size_of::<QnnInterface_t>() == 608);

    assert!(size_of::<QnnSystemInterface_FunctionTable_t>() == 16 * 8);
    assert!(offset_of!(QnnSystemInterface_FunctionTable_t, systemContextFree) == 24);
    assert!(offset_of!(QnnSystemInterface_t, providerName) == 8);
    assert!(offset_of!(QnnSystemInterface_t, systemApiVersion) == 16);
    assert!(offset_of!(QnnSystemInterface_t, v1) == 32);
    assert!(size_of::<QnnSystemInterface_t>() == 32 + 16 * 8);
};
