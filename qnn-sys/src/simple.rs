//! A small safe wrapper: a static MatMul graph with constant weights, built and finalized
//! once, executed many times on caller-provided slices without allocating.
//!
//! ```no_run
//! use qnn_sys::simple::{GraphOptions, MatMulGraph, MatMulShape, Order};
//! use qnn_sys::{BackendLibrary, Session, SessionOptions};
//! use half::f16;
//! use std::sync::Arc;
//!
//! let lib = Arc::new(BackendLibrary::load_htp()?); // $QNN_HTP_LIB
//! let session = Session::new(lib, &SessionOptions { soc_model: Some(69), ..Default::default() })?;
//! let shape = MatMulShape { m: 32, k: 64, n: 48 };
//! let w = vec![f16::from_f32(0.5); shape.weights_len()]; // [K, N] row-major
//! let g = MatMulGraph::new(&session, shape, &w, Order::Direct, &GraphOptions::default())?;
//! let x = vec![f16::from_f32(1.0); shape.input_len()]; // [M, K]
//! let mut y = vec![f16::ZERO; shape.output_len()]; // [M, N]
//! g.execute(&x, &mut y)?;
//! # Ok::<(), qnn_sys::Error>(())
//! ```

use crate::ffi::*;
use crate::{Error, Session};

use core::ffi::c_void;
use core::marker::PhantomData;
use core::ptr::{null, null_mut};
use std::ffi::CString;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod sealed {
    pub trait Sealed {}
    impl Sealed for half::f16 {}
    impl Sealed for f32 {}
}

/// An element type a graph can take as input/output/weights: `half::f16` or `f32`.
pub trait Element: sealed::Sealed + Copy + Send + Sync + 'static {
    /// The QNN data type.
    const DATA_TYPE: Qnn_DataType_t;
}

impl Element for half::f16 {
    const DATA_TYPE: Qnn_DataType_t = QNN_DATATYPE_FLOAT_16;
}

impl Element for f32 {
    const DATA_TYPE: Qnn_DataType_t = QNN_DATATYPE_FLOAT_32;
}

/// `Y[M,N] = X[M,K] · W[K,N]`, all row-major.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MatMulShape {
    /// Rows of X and Y (tokens).
    pub m: usize,
    /// Columns of X, rows of W.
    pub k: usize,
    /// Columns of W and Y.
    pub n: usize,
}

impl MatMulShape {
    /// Elements of X: `m * k`.
    pub fn input_len(&self) -> usize {
        self.m * self.k
    }
    /// Elements of W: `k * n`.
    pub fn weights_len(&self) -> usize {
        self.k * self.n
    }
    /// Elements of Y: `m * n`.
    pub fn output_len(&self) -> usize {
        self.m * self.n
    }

    fn validate(&self, elem: usize) -> Result<(), Error> {
        if self.m == 0 || self.k == 0 || self.n == 0 {
            return Err(Error::InvalidShape {
                reason: format!("zero dimension in {self:?}"),
            });
        }
        let fits = |a: usize, b: usize| {
            a.checked_mul(b)
                .and_then(|e| e.checked_mul(elem))
                .is_some_and(|bytes| bytes <= u32::MAX as usize)
        };
        if self.m > u32::MAX as usize
            || self.k > u32::MAX as usize
            || self.n > u32::MAX as usize
            || !fits(self.m, self.k)
            || !fits(self.k, self.n)
            || !fits(self.m, self.n)
        {
            return Err(Error::InvalidShape {
                reason: format!("{self:?} exceeds QNN's 32-bit buffer sizes"),
            });
        }
        Ok(())
    }
}

/// Operand order inside the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Order {
    /// `MatMul(X[M,K], W[K,N]) → Y[M,N]`.
    Direct,
    /// HeteroInfer's weight-stationary form: `Y = (Wᵀ·Xᵀ)ᵀ`. The weights are stored
    /// transposed (`Wᵀ[N,K]`, done once at build time) as the first operand, X is the second
    /// operand with `transpose_in1`, giving `Yᵀ[N,M]`, and a `Transpose` node (perm `[1,0]`)
    /// produces `Y[M,N]`. Same input/output layout as [`Order::Direct`].
    WeightFirst,
    /// As [`Order::WeightFirst`] without the final transpose: `execute` writes `Yᵀ[N,M]`
    /// (row-major) into the output slice.
    WeightFirstTransposedOutput,
}

/// How the caller's weight slice is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WeightLayout {
    /// `W[K,N]` row-major (the math layout of `Y = X·W`).
    #[default]
    KxN,
    /// `Wᵀ[N,K]` row-major: one row per output feature, as GGUF and PyTorch `Linear` store
    /// weights. Used as is (Direct: `transpose_in1`; weight-first: operand 0), no host copy.
    NxK,
}

/// HTP graph configs and the weight layout.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GraphOptions {
    /// Layout of the weight slice passed to [`MatMulGraph::new`] (default `KxN`).
    pub weights: WeightLayout,
    /// Float precision (default FP16: `QNN_PRECISION_FLOAT16`); `None` sends no config.
    pub precision: Option<Qnn_Precision_t>,
    /// VTCM size in MB; `None` sends no config.
    pub vtcm_mb: Option<u32>,
    /// Finalize optimization level 1..=3 (O1..O3; the backend default is O2); `None` sends no
    /// config.
    pub optimization_level: Option<u8>,
}

impl Default for GraphOptions {
    fn default() -> Self {
        Self {
            weights: WeightLayout::KxN,
            precision: Some(QNN_PRECISION_FLOAT16),
            vtcm_mb: None,
            optimization_level: None,
        }
    }
}

/// A finalized static MatMul graph with constant weights. Create once, then
/// [`MatMulGraph::execute`] many times: no allocation per execution.
///
/// `MatMulGraph` is `Send + Sync`: executions from several threads are serialized on the
/// process-wide [`crate::device_lock`] (one graph at a time, like the NPU itself; see there why).
#[derive(Debug)]
pub struct MatMulGraph<T: Element> {
    session: Arc<Session>,
    graph: Qnn_GraphHandle_t,
    input: Qnn_Tensor_t,
    output: Qnn_Tensor_t,
    shape: MatMulShape,
    order: Order,
    finalize_time: Duration,
    build_time: Duration,
    // The tensors above point at these heap blocks (names, dimensions): keep them alive and
    // unmoved (moving a Box/CString does not move its heap block).
    _names: Vec<CString>,
    _dims: Vec<Box<[u32]>>,
    _elem: PhantomData<T>,
}

// SAFETY: the raw pointers inside (graph handle, tensor names/dims) point to memory owned by
// this value or by the session it keeps alive; executions are serialized by device_lock.
unsafe impl<T: Element> Send for MatMulGraph<T> {}
// SAFETY: `&self` methods only read the immutable tensor templates and call graphExecute under
// device_lock.
unsafe impl<T: Element> Sync for MatMulGraph<T> {}

/// Builder state: owns names and dims while tensors point at them.
struct Builder<'s> {
    session: &'s Session,
    graph: Qnn_GraphHandle_t,
    prefix: String,
    names: Vec<CString>,
    dims: Vec<Box<[u32]>>,
}

impl Builder<'_> {
    fn cstring(&mut self, suffix: &str) -> *const core::ffi::c_char {
        // Names are ASCII without NUL: "<prefix>_<suffix>".
        let s = CString::new(format!("{}_{suffix}", self.prefix)).unwrap_or_default();
        let p = s.as_ptr();
        self.names.push(s);
        p
    }

    /// Creates a graph tensor; for STATIC tensors `data` is copied by the backend.
    fn tensor(
        &mut self,
        suffix: &str,
        type_: Qnn_TensorType_t,
        data_type: Qnn_DataType_t,
        dims: &[u32],
        data: Option<(*const c_void, usize)>,
    ) -> Result<Qnn_Tensor_t, Error> {
        let name = self.cstring(suffix);
        let mut d: Box<[u32]> = dims.into();
        let dims_ptr = d.as_mut_ptr();
        self.dims.push(d);
        let mut t = Qnn_Tensor_t::V2_INIT;
        // SAFETY: V2_INIT initializes the v2 member; we only write fields of it.
        unsafe {
            let v2 = &mut t.u.v2;
            v2.name = name;
            v2.type_ = type_;
            v2.dataType = data_type;
            v2.rank = dims.len() as u32;
            v2.dimensions = dims_ptr;
            v2.memType = QNN_TENSORMEMTYPE_RAW;
            if let Some((p, bytes)) = data {
                v2.mem.clientBuf = Qnn_ClientBuffer_t {
                    data: p.cast_mut(),
                    dataSize: bytes as u32,
                };
            }
        }
        let f = self
            .session
            .fns()
            .tensorCreateGraphTensor
            .ok_or(Error::MissingFunction {
                name: "tensorCreateGraphTensor",
            })?;
        // SAFETY: the graph is live and being built under device_lock; `t` is a
        // fully initialized V2 tensor whose name/dims point into self.names/self.dims, and
        // whose static data (if any) is valid for `bytes` bytes for the duration of the call
        // (the backend copies it).
        let rc = unsafe { f(self.graph, &mut t) };
        self.session.check("tensorCreateGraphTensor", rc)?;
        // A STATIC tensor keeps its data pointer: it is passed on to graphAddNode (inputs and
        // tensor params) while the data is still alive, and never stored in the graph wrapper.
        Ok(t)
    }

    fn node(
        &mut self,
        suffix: &str,
        type_name: &'static core::ffi::CStr,
        params: &mut [Qnn_Param_t],
        inputs: &mut [Qnn_Tensor_t],
        outputs: &mut [Qnn_Tensor_t],
    ) -> Result<(), Error> {
        let name = self.cstring(suffix);
        let op = Qnn_OpConfig_t {
            version: QNN_OPCONFIG_VERSION_1,
            v1: Qnn_OpConfigV1_t {
                name,
                packageName: c"qti.aisw".as_ptr(),
                typeName: type_name.as_ptr(),
                numOfParams: params.len() as u32,
                params: params.as_mut_ptr(),
                numOfInputs: inputs.len() as u32,
                inputTensors: inputs.as_mut_ptr(),
                numOfOutputs: outputs.len() as u32,
                outputTensors: outputs.as_mut_ptr(),
            },
        };
        let f = self.session.fns();
        if let Some(validate) = f.backendValidateOpConfig {
            // SAFETY: the op config points at live arrays of 160-/144-byte params/tensors
            // created in this graph, and at static/owned C strings.
            let rc = unsafe { validate(self.session.backend_handle(), op) };
            self.session.check("backendValidateOpConfig", rc)?;
        }
        let add = f.graphAddNode.ok_or(Error::MissingFunction {
            name: "graphAddNode",
        })?;
        // SAFETY: as above; the graph is live and not yet finalized.
        let rc = unsafe { add(self.graph, op) };
        self.session.check("graphAddNode", rc)
    }
}

fn bool_param(name: &'static core::ffi::CStr, value: bool) -> Qnn_Param_t {
    Qnn_Param_t {
        paramType: QNN_PARAMTYPE_SCALAR,
        name: name.as_ptr(),
        u: Qnn_ParamValue_t {
            scalarParam: Qnn_Scalar_t {
                dataType: QNN_DATATYPE_BOOL_8,
                value: Qnn_ScalarValue_t {
                    uint64Value: value as u64,
                },
            },
        },
    }
}

impl<T: Element> MatMulGraph<T> {
    /// Builds and finalizes the graph. `weights` is `W[K,N]` row-major, or `Wᵀ[N,K]` with
    /// `opts.weights = WeightLayout::NxK` (at least `shape.weights_len()` elements; extra
    /// elements are ignored); it is copied into the graph.
    pub fn new(
        session: &Arc<Session>,
        shape: MatMulShape,
        weights: &[T],
        order: Order,
        opts: &GraphOptions,
    ) -> Result<Self, Error> {
        let elem = core::mem::size_of::<T>();
        shape.validate(elem)?;
        if weights.len() < shape.weights_len() {
            return Err(Error::BufferTooSmall {
                what: "weights",
                needed: shape.weights_len(),
                got: weights.len(),
            });
        }
        if let Some(level) = opts.optimization_level {
            if !(1..=3).contains(&level) {
                return Err(Error::InvalidShape {
                    reason: format!("optimization level {level} is not 1, 2 or 3"),
                });
            }
        }
        let t0 = Instant::now();
        let _device = crate::device_lock();
        let id = session.unique_id();
        let prefix = format!("matmul{id}");
        let f = *session.fns();

        // Graph configs (HTP custom): precision, VTCM, optimization level.
        let mut customs: Vec<QnnHtpGraph_CustomConfig_t> = Vec::new();
        if let Some(p) = opts.precision {
            // Zero the whole 48-byte union, then set the member (endianness-independent).
            let mut u = QnnHtpGraph_CustomConfigValue_t { raw: [0; 6] };
            u.precision = p;
            customs.push(QnnHtpGraph_CustomConfig_t {
                option: QNN_HTP_GRAPH_CONFIG_OPTION_PRECISION,
                u,
            });
        }
        if let Some(mb) = opts.vtcm_mb {
            let mut u = QnnHtpGraph_CustomConfigValue_t { raw: [0; 6] };
            u.vtcmSizeInMB = mb;
            customs.push(QnnHtpGraph_CustomConfig_t {
                option: QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE_IN_MB,
                u,
            });
        }
        if let Some(level) = opts.optimization_level {
            let mut u = QnnHtpGraph_CustomConfigValue_t { raw: [0; 6] };
            u.optimizationOption = QnnHtpGraph_OptimizationOption_t {
                type_: QNN_HTP_GRAPH_OPTIMIZATION_TYPE_FINALIZE_OPTIMIZATION_FLAG,
                floatValue: level as f32,
            };
            customs.push(QnnHtpGraph_CustomConfig_t {
                option: QNN_HTP_GRAPH_CONFIG_OPTION_OPTIMIZATION,
                u,
            });
        }
        let configs: Vec<QnnGraph_Config_t> = customs
            .iter_mut()
            .map(|c| QnnGraph_Config_t {
                option: QNN_CONFIG_OPTION_CUSTOM,
                u: QnnGraph_ConfigValue_t {
                    customConfig: (c as *mut QnnHtpGraph_CustomConfig_t).cast(),
                },
            })
            .collect();
        let mut list: Vec<*const QnnGraph_Config_t> =
            configs.iter().map(|c| c as *const _).collect();
        list.push(null());

        let graph_name = CString::new(prefix.clone()).unwrap_or_default();
        let create = f.graphCreate.ok_or(Error::MissingFunction {
            name: "graphCreate",
        })?;
        let mut graph: Qnn_GraphHandle_t = null_mut();
        // SAFETY: graphCreate(live context, NUL-terminated name, NULL-terminated config list
        // pointing into `configs`/`customs` which outlive the call, out-pointer), under
        // device_lock.
        let rc = unsafe {
            create(
                session.context_handle(),
                graph_name.as_ptr(),
                list.as_ptr(),
                &mut graph,
            )
        };
        session.check("graphCreate", rc)?;

        let mut b = Builder {
            session,
            graph,
            prefix,
            names: vec![graph_name],
            dims: Vec::new(),
        };
        let (m, k, n) = (shape.m as u32, shape.k as u32, shape.n as u32);
        let dt = T::DATA_TYPE;
        let (input, output) = match order {
            Order::Direct => {
                let x = b.tensor("x", QNN_TENSOR_TYPE_APP_WRITE, dt, &[m, k], None)?;
                let nxk = opts.weights == WeightLayout::NxK;
                let w_dims = if nxk { [n, k] } else { [k, n] };
                let w = b.tensor(
                    "w",
                    QNN_TENSOR_TYPE_STATIC,
                    dt,
                    &w_dims,
                    Some((weights.as_ptr().cast(), shape.weights_len() * elem)),
                )?;
                let y = b.tensor("y", QNN_TENSOR_TYPE_APP_READ, dt, &[m, n], None)?;
                let mut params = [
                    bool_param(c"transpose_in0", false),
                    bool_param(c"transpose_in1", nxk),
                ];
                b.node("mm", c"MatMul", &mut params, &mut [x, w], &mut [y])?;
                (x, y)
            }
            Order::WeightFirst | Order::WeightFirstTransposedOutput => {
                // Wᵀ[N,K] as operand 0: the caller's slice as is, or transposed once here
                // (build time, may allocate).
                let wt: Vec<T> = match opts.weights {
                    WeightLayout::NxK => Vec::new(),
                    WeightLayout::KxN => {
                        let mut wt = Vec::with_capacity(shape.weights_len());
                        for j in 0..shape.n {
                            wt.extend((0..shape.k).map(|kk| weights[kk * shape.n + j]));
                        }
                        wt
                    }
                };
                let wt_slice: &[T] = match opts.weights {
                    WeightLayout::NxK => &weights[..shape.weights_len()],
                    WeightLayout::KxN => &wt,
                };
                let w = b.tensor(
                    "wt",
                    QNN_TENSOR_TYPE_STATIC,
                    dt,
                    &[n, k],
                    Some((wt_slice.as_ptr().cast(), core::mem::size_of_val(wt_slice))),
                )?;
                let x = b.tensor("x", QNN_TENSOR_TYPE_APP_WRITE, dt, &[m, k], None)?;
                let mut params = [
                    bool_param(c"transpose_in0", false),
                    bool_param(c"transpose_in1", true),
                ];
                if order == Order::WeightFirstTransposedOutput {
                    let yt = b.tensor("yt", QNN_TENSOR_TYPE_APP_READ, dt, &[n, m], None)?;
                    b.node("mm", c"MatMul", &mut params, &mut [w, x], &mut [yt])?;
                    (x, yt)
                } else {
                    let yt = b.tensor("yt", QNN_TENSOR_TYPE_NATIVE, dt, &[n, m], None)?;
                    b.node("mm", c"MatMul", &mut params, &mut [w, x], &mut [yt])?;
                    let perm_data: [u32; 2] = [1, 0];
                    let perm = b.tensor(
                        "perm",
                        QNN_TENSOR_TYPE_STATIC,
                        QNN_DATATYPE_UINT_32,
                        &[2],
                        Some((perm_data.as_ptr().cast(), 8)),
                    )?;
                    let mut tparams = [Qnn_Param_t {
                        paramType: QNN_PARAMTYPE_TENSOR,
                        name: c"perm".as_ptr(),
                        u: Qnn_ParamValue_t { tensorParam: perm },
                    }];
                    let y = b.tensor("y", QNN_TENSOR_TYPE_APP_READ, dt, &[m, n], None)?;
                    b.node("tr", c"Transpose", &mut tparams, &mut [yt], &mut [y])?;
                    (x, y)
                }
            }
        };
        let finalize = f.graphFinalize.ok_or(Error::MissingFunction {
            name: "graphFinalize",
        })?;
        let t1 = Instant::now();
        // SAFETY: the graph is live, fully built, under device_lock; no profile/signal.
        let rc = unsafe { finalize(graph, null_mut(), null_mut()) };
        session.check("graphFinalize", rc)?;
        let finalize_time = t1.elapsed();
        Ok(Self {
            session: Arc::clone(session),
            graph,
            input,
            output,
            shape,
            order,
            finalize_time,
            build_time: t0.elapsed(),
            _names: b.names,
            _dims: b.dims,
            _elem: PhantomData,
        })
    }

    /// Runs the graph: reads `x` (`X[M,K]`, at least `input_len` elements), writes `y`
    /// (`Y[M,N]`, or `Yᵀ[N,M]` for [`Order::WeightFirstTransposedOutput`]; at least
    /// `output_len` elements). Extra elements are neither read nor written. Does not allocate.
    pub fn execute(&self, x: &[T], y: &mut [T]) -> Result<(), Error> {
        let elem = core::mem::size_of::<T>();
        let (nx, ny) = (self.shape.input_len(), self.shape.output_len());
        if x.len() < nx {
            return Err(Error::BufferTooSmall {
                what: "input",
                needed: nx,
                got: x.len(),
            });
        }
        if y.len() < ny {
            return Err(Error::BufferTooSmall {
                what: "output",
                needed: ny,
                got: y.len(),
            });
        }
        let exec = self
            .session
            .fns()
            .graphExecute
            .ok_or(Error::MissingFunction {
                name: "graphExecute",
            })?;
        let mut input = self.input;
        let mut output = self.output;
        // Both templates are V2 tensors (built by `Builder::tensor`); only clientBuf changes.
        // (Writing a Copy union field is safe; reading it back is what needs care.)
        input.u.v2.mem.clientBuf = Qnn_ClientBuffer_t {
            data: x.as_ptr().cast_mut().cast(),
            dataSize: (nx * elem) as u32,
        };
        output.u.v2.mem.clientBuf = Qnn_ClientBuffer_t {
            data: y.as_mut_ptr().cast(),
            dataSize: (ny * elem) as u32,
        };
        let _device = crate::device_lock();
        // SAFETY: the graph is finalized and its session alive (we hold an Arc). The input
        // buffer holds nx elements and the output ny elements, exactly what the tensors'
        // dimensions say (checked above; QNN does not check). The backend reads x and writes y
        // only during this synchronous call; all executions are serialized on device_lock.
        let rc = unsafe {
            exec(
                self.graph,
                &input,
                1,
                &mut output,
                1,
                null_mut(),
                null_mut(),
            )
        };
        self.session.check("graphExecute", rc)
    }

    /// The shape.
    pub fn shape(&self) -> MatMulShape {
        self.shape
    }

    /// The operand order.
    pub fn order(&self) -> Order {
        self.order
    }

    /// Time spent in `graphFinalize` (HeteroInfer's static-graph preparation cost).
    pub fn finalize_time(&self) -> Duration {
        self.finalize_time
    }

    /// Time spent building the graph, finalize included.
    pub fn build_time(&self) -> Duration {
        self.build_time
    }

    /// The session.
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// The raw graph handle.
    pub fn graph_handle(&self) -> Qnn_GraphHandle_t {
        self.graph
    }
}
