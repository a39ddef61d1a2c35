// nvfp4.cuh: the public header of the FP4 module (llmc/fp4/), what the trainer and the tools include: recipes, the
// linear executor that runs a model's linear layers under them, and the quantizer's entry points. Everything else
// under llmc/fp4/ is the module's inside (plans, operand forms, scale slots, quantization passes, kernels).
// defines (from the headers below):
//   LinearDesc, LinearExec, linear_exec_init(), linear_set_recipe(), linear_forward(), linear_backward(), ...  fp4/linear.cuh
//   Recipe, recipe_preset(), recipe_set_slot(), recipe_check(), recipe_describe()      fp4/recipe.h
//   RecipeSchedule, recipe_with_bf16_forward()                                         fp4/recipe_schedule.h
//   LinearPlan, linear_plan_build(), LinearScalars                                     fp4/linear_plan.h
//   QuantTarget, quantize_fast_gpu(), quant_fast_apply_gpu(), quant_fast_stats_gpu()   fp4/quant.cuh
//   quant_compare_gpu()                                                                fp4/quant.cuh
//   AttnFp4, attn_fp4_set(), attn_fp4_quantize_qkv_gpu(), attn_fp4_quantize_ds_gpu()   fp4/attention_fp4.cuh
//   matmul_fp4_forward/_dgrad/_wgrad() (Blackwell), matmul_fp8() (Hopper)              fp4/matmul_fp4.cuh, matmul_fp8.cuh
#pragma once
#include "llmc/fp4/recipe.h"
#include "llmc/fp4/recipe_schedule.h"
#include "llmc/fp4/linear_plan.h"
#include "llmc/fp4/quant.cuh"
#include "llmc/fp4/matmul_fp4.cuh"
#include "llmc/fp4/matmul_fp8.cuh"
#include "llmc/fp4/linear.cuh"
#include "llmc/fp4/attention_fp4.cuh"
