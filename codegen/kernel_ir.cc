#include "codegen/kernel_ir.h"

namespace metajit {
namespace {

const char* kop_name(KOp k) {
  switch (k) {
    case KOp::Load:
      return "load";
    case KOp::Scalar:
      return "scalar";
    case KOp::Iota:
      return "iota";
    case KOp::Unary:
      return "unary";
    case KOp::Binary:
      return "binary";
    case KOp::Where:
      return "where";
    case KOp::Cast:
      return "cast";
    case KOp::Guard:
      return "guard";
    case KOp::Reduce:
      return "reduce";
  }
  return "?";
}

std::string exprs(const std::vector<IndexExprPtr>& v) {
  std::string s = "[";
  for (size_t k = 0; k < v.size(); ++k) s += (k ? "," : "") + ix_to_string(*v[k]);
  return s + "]";
}

std::string loops(const std::vector<KLoop>& v) {
  std::string s;
  for (const KLoop& l : v) s += " i" + std::to_string(l.var) + "<" + ix_to_string(*l.extent);
  return s;
}

void print_block(const KBlock& b, const std::string& indent, std::string& out) {
  for (const KStmt& st : b.stmts) {
    out += indent + "v" + std::to_string(st.id) + ":" + dtype_name(st.dtype) + " = " +
           kop_name(st.kind);
    switch (st.kind) {
      case KOp::Load:
        out += " in" + std::to_string(st.buffer) + exprs(st.index);
        break;
      case KOp::Scalar:
        out += " s" + std::to_string(st.slot);
        break;
      case KOp::Iota:
        out += " " + exprs(st.index);
        break;
      case KOp::Unary:
        out += std::string(".") + unary_op_name(UnaryOp(st.op));
        break;
      case KOp::Binary:
        out += std::string(".") + binary_op_name(BinaryOp(st.op));
        break;
      case KOp::Guard:
        out += " " + ix_to_string(*st.cond) + " else s" + std::to_string(st.slot);
        break;
      case KOp::Reduce:
        out += std::string(".") + reduce_op_name(ReduceOp(st.op)) + loops(st.loops);
        break;
      default:
        break;
    }
    for (int a : st.args) out += " v" + std::to_string(a);
    out += "\n";
    if (st.body) {
      out += indent + "{\n";
      print_block(*st.body, indent + "  ", out);
      out += indent + "}\n";
    }
  }
  out += indent + "yield v" + std::to_string(b.result) + "\n";
}

}  // namespace

std::string serialize_ir(const KernelIR& ir) {
  std::string out = ir.kind == KernelKind::Map ? "map\n" : "scatter\n";
  for (size_t k = 0; k < ir.inputs.size(); ++k)
    out += "in" + std::to_string(k) + " " + dtype_name(ir.inputs[k].dtype) +
           exprs(ir.inputs[k].dims) + "\n";
  out += std::string("out ") + dtype_name(ir.output.dtype) + exprs(ir.output.dims) + "\n";
  for (size_t k = 0; k < ir.extra_outputs.size(); ++k)
    out += "out" + std::to_string(k + 1) + " " + dtype_name(ir.extra_outputs[k].buffer.dtype) +
           exprs(ir.extra_outputs[k].buffer.dims) + " = v" +
           std::to_string(ir.extra_outputs[k].value) + "\n";
  out += "loops" + loops(ir.loops) + "\n";
  print_block(ir.body, "  ", out);
  if (ir.kind == KernelKind::Scatter)
    out += std::string("scatter.") + reduce_op_name(ReduceOp(ir.scatter_op)) + " " +
           exprs(ir.target) + " if " + ix_to_string(*ir.target_valid) + "\n";
  out += "params " + std::to_string(ir.num_params) + " scalars " + std::to_string(ir.num_scalars) +
         " vars " + std::to_string(ir.num_vars) + "\n";
  return out;
}

}  // namespace metajit
