#define PY_SSIZE_T_CLEAN
#include <Python.h>
/* PROTOTYPE for benchmarks/mode_floor.py: a base class whose
   __torch_function__(func, types, args=(), kwargs=None) is C and only calls
   func(*args, **kwargs). Mixed into a TorchFunctionMode, it measures the
   mode machinery without any Python in the handler. */
typedef struct { PyObject_HEAD } Base;
static PyObject* tf(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (n < 1) { PyErr_SetString(PyExc_TypeError, "func"); return NULL; }
  PyObject* args = n > 2 ? a[2] : NULL;
  PyObject* kwargs = n > 3 ? a[3] : NULL;
  if (kwargs == Py_None) kwargs = NULL;
  if (args == NULL) { PyObject* t = PyTuple_New(0); PyObject* r = PyObject_Call(a[0], t, kwargs); Py_DECREF(t); return r; }
  return PyObject_Call(a[0], args, kwargs);
}
static PyMethodDef methods[] = {{"__torch_function__", (PyCFunction)(void(*)(void))tf, METH_FASTCALL, ""}, {NULL}};
static PyTypeObject BaseType = {PyVarObject_HEAD_INIT(NULL, 0) .tp_name = "mode_floor_c.CallOnly",
  .tp_basicsize = sizeof(Base), .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
  .tp_new = PyType_GenericNew, .tp_methods = methods};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "mode_floor_c", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_mode_floor_c(void) {
  if (PyType_Ready(&BaseType) < 0) return NULL;
  PyObject* m = PyModule_Create(&mod);
  Py_INCREF(&BaseType); PyModule_AddObject(m, "CallOnly", (PyObject*)&BaseType);
  return m;
}
